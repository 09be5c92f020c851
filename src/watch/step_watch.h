// The per-rank side of lens/straggler.h: what setup tells it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace lens::internal {

struct StepWatchSettings {
  std::int64_t interval = 0;  // steps per window; 0: off
  std::string run_id;         // its tag goes with every summary
  int rank = 0, local_rank = 0;
  std::string host{};    // host.name: sent with the rank's summaries, so the scorer's series about it name its host
  bool exports = false;  // with metrics on: it may score and record (the lowest such rank does)
};

// A new setup: turns the phase sums on or off and empties the window.
void configure_step_watch(const StepWatchSettings& settings) noexcept;

// What goodput needs from the job's own clock (lens.goodput.*, CONTRACT §8): when this setup began, and the time
// spent in steps (each from its iteration boundary to its end_step), in steady nanoseconds.
struct StepTimeTotals {
  std::uint64_t setup_steady_ns = 0;
  std::uint64_t in_steps_ns = 0;
  std::int64_t steps = 0;
  std::int64_t last_iteration = -1;  // the last end_step's (-1: none)
};
StepTimeTotals step_time_totals() noexcept;

// Called on the thread that scores a window, before it scores (null: nothing); for tests.
void set_scoring_observer_for_testing(std::function<void()> observer);

// The tag of a run id as summaries carry it: non-zero, non-negative.
std::int64_t run_tag_of(std::string_view run_id) noexcept;

}  // namespace lens::internal
