// The per-rank side of lens/straggler.h: what setup tells it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lens::internal {

struct StepWatchSettings {
  std::int64_t interval = 0;  // steps per window; 0: off
  std::string run_id;         // its tag goes with every summary
  int rank = 0;
  bool exports = false;       // with metrics on: it may score and record (the lowest such rank does)
};

// A new setup: turns the phase sums on or off and empties the window.
void configure_step_watch(const StepWatchSettings& settings) noexcept;

// The tag of a run id as summaries carry it: non-zero, non-negative.
std::int64_t run_tag_of(std::string_view run_id) noexcept;

}  // namespace lens::internal
