// lens/straggler.h: stragglers found while the job trains, on every rank, whatever it exports.
//
// Each rank sums, per step, its compute (forward + backward) and its wait (pipeline receive + gradient sync) with
// LENS_STEP_PHASE scopes beside the spans that time them; the sums are kept whatever span groups are enabled and
// on ranks that export nothing, so a coarse production job is watched too. Every STRAGGLER_INTERVAL steps
// (MEGATRON_OTEL_STRAGGLER_INTERVAL, default 20, 0: off) each rank's window is a fixed-size summary that the
// consumer gathers with its own collective, as for lens/control.h; the (lowest) exporting rank hands them to lens's
// scoring thread, off the training thread, which scores them with the rule `lens report` uses
// (src/watch/straggler_rule.h, O(n log n) in the ranks of a stage) and records lens.straggler.score, lens.step.compute
// and lens.step.wait per rank, and a log record naming a flagged rank. Its findings can be taken later (usually at the
// next window).
//
//   { LENS_STEP_PHASE(lens::StepPhase::kCompute); forward(); }
//   { LENS_STEP_PHASE(lens::StepPhase::kWait); recv(); }
//   lens::end_step(iteration);                                  // every rank, every step
//   if (lens::straggler_summary_due(iteration)) {
//     lens::StragglerSummary mine = lens::take_straggler_summary(iteration, pipeline_stage);
//     // ... each rank puts mine.encode() in its slot of a world_size x kWords int64 tensor, all-reduce SUM ...
//     lens::score_stragglers(iteration, summaries_by_rank);      // returns at once
//     if (auto found = lens::take_straggler_findings(); found && !found->flagged.empty())  // an earlier window's
//       segment_span.add_event("lens.straggler", {{"dl.rank", found->flagged.front()}});
//   }
//
// With LENS_DISABLED every call is an inline no-op and LENS_STEP_PHASE vanishes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lens/internal/visibility.h"
#include "lens/span.h"  // LENS_INTERNAL_CONCAT

namespace lens {

enum class StepPhase : std::uint8_t { kCompute = 0, kWait = 1 };

// One rank's window of steps, as every rank sends it: fixed-size, non-negative words below 2^53 (exact in a double),
// so a SUM all-reduce of a tensor in which each rank fills only its own slot gathers them. The rank's host name and
// local rank travel with it, so that what the scoring rank records about it names its machine.
struct StragglerSummary {
  static constexpr int kHostWords = 11;  // the host name, 6 bytes a word: 66 bytes (a host name has at most 64)
  static constexpr int kWords = 9 + kHostWords;
  std::int64_t run_tag = 0;     // from the run id (never 0): a summary of another run is refused
  std::int64_t iteration = 0;   // the window's last iteration: a summary of another window is refused
  std::int64_t stage = 0;       // pipeline stage of the rank
  std::int64_t steps = 0;       // steps in the window (0: the slot was not filled, a missing rank)
  std::int64_t compute_ns = 0;  // median compute per step over the window
  std::int64_t wait_ns = 0;     // median wait per step over the window
  std::int64_t exports = 0;     // 1: the rank exports; the lowest such rank scores, so one rank records the figures
  std::int64_t local_rank = 0;  // its rank on its host
  std::array<std::int64_t, kHostWords> host{};  // its host name (host.name), 6 bytes a word, zero-padded
  std::int64_t tensor_rank = 0;  // tensor-parallel rank: ranks are compared with those of its stage and position

  std::array<std::int64_t, kWords> encode() const noexcept {
    std::array<std::int64_t, kWords> w{run_tag, iteration, stage, steps, compute_ns, wait_ns, exports, local_rank};
    for (int i = 0; i < kHostWords; ++i) w[8 + i] = host[i];
    w[8 + kHostWords] = tensor_rank;
    return w;
  }
  static StragglerSummary decode(const std::array<std::int64_t, kWords>& w) noexcept {
    StragglerSummary s{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], {}, w[8 + kHostWords]};
    for (int i = 0; i < kHostWords; ++i) s.host[i] = w[8 + i];
    return s;
  }
  // The host name into `host` (its first 66 bytes) and back; a word out of range reads as no more name.
  void set_host_name(std::string_view name) noexcept {
    host = {};
    for (std::size_t i = 0; i < name.size() && i < std::size_t{kHostWords} * 6; ++i)
      host[i / 6] |= std::int64_t{static_cast<unsigned char>(name[i])} << (8 * (i % 6));
  }
  std::string host_name() const {
    std::string name;
    for (std::int64_t word : host) {
      if (word < 0 || word >= (std::int64_t{1} << 48)) break;
      for (int b = 0; b < 6; ++b) {
        const char c = static_cast<char>((word >> (8 * b)) & 0xff);
        if (c == '\0') return name;
        name += c;
      }
    }
    return name;
  }
};

// One rank as the exporting rank scored it.
struct StragglerVerdict {
  int rank = 0, stage = 0;
  int tensor_rank = 0;  // its tensor-parallel rank: its peers are the ranks of its stage at the same position
  int local_rank = 0;
  std::string host{};  // its host name, as its summary said (empty: none)
  bool scored = false, flagged = false;
  double score = 0;  // compute over its peers' median compute
  double compute_ms = 0, wait_ms = 0, peer_compute_ms = 0, peer_wait_ms = 0;
  // Windows in a row, up to this one, in which the rank was named a straggler (0: not in this one). The straggler
  // alert waits for two, so that one window on a loaded machine does not page.
  std::int64_t flagged_windows = 0;
};

// What one gather said.
struct StragglerFindings {
  std::int64_t iteration = 0;
  std::vector<StragglerVerdict> ranks;  // scored or not, ranks that sent a valid summary
  std::vector<int> flagged;             // named stragglers
  std::vector<int> missing;             // slots left empty: ranks that sent nothing (dead, or not gathered)
  std::vector<int> refused;             // another run's or window's summary, or impossible times
  std::string text;                     // one line for a person: who straggles, or that none does
};

namespace internal {
#if !defined(LENS_DISABLED)
extern LENS_API std::atomic<bool> g_step_phases_on;
// A wait begun and ended inside a compute scope of the same thread is taken out of that compute.
LENS_API std::uint64_t step_phase_begin(StepPhase phase) noexcept;
LENS_API void step_phase_end(StepPhase phase, std::uint64_t begin) noexcept;
#endif
}  // namespace internal

#if !defined(LENS_DISABLED)

// Adds the time of its scope to this step's compute or wait (one relaxed load when STRAGGLER_INTERVAL is 0).
class StepPhaseScope {
 public:
  explicit StepPhaseScope(StepPhase phase) noexcept : phase_(phase) {
    if (internal::g_step_phases_on.load(std::memory_order_relaxed)) begin_ = internal::step_phase_begin(phase);
  }
  ~StepPhaseScope() {
    if (begin_ != 0) internal::step_phase_end(phase_, begin_);
  }
  StepPhaseScope(const StepPhaseScope&) = delete;
  StepPhaseScope& operator=(const StepPhaseScope&) = delete;

 private:
  StepPhase phase_;
  std::uint64_t begin_ = 0;
};

LENS_ABI_NAMESPACE_BEGIN

// Every rank, once per step, after its last phase: closes the step's sums into the window.
LENS_API void end_step(std::int64_t iteration) noexcept;
// Whether `iteration` (just ended) closes a window: STRAGGLER_INTERVAL > 0 and a multiple of it.
LENS_API bool straggler_summary_due(std::int64_t iteration) noexcept;
// This rank's window as it is sent, then a new window. `stage` and `tensor_rank`: its pipeline stage and
// tensor-parallel rank; it is compared with the ranks of the same stage at the same tensor-parallel position (its
// data-parallel replicas), which do the same work.
LENS_API StragglerSummary take_straggler_summary(std::int64_t iteration, int stage, int tensor_rank = 0) noexcept;
// The lowest exporting rank: copies the gathered summaries (index = rank) to lens's scoring thread and returns at once
// (true); that thread scores them, records the metrics and logs a flagged rank. A window handed over while the one
// before still waits to be scored replaces it. Elsewhere, or with scoring off, nothing (false).
LENS_API bool score_stragglers(std::int64_t iteration, std::span<const StragglerSummary> by_rank) noexcept;
// The findings of the latest window the scoring thread has finished and nobody has taken yet; with a `wait`, until
// then for a window handed over to finish. nullopt: none.
LENS_API std::optional<StragglerFindings> take_straggler_findings(
    std::chrono::milliseconds wait = std::chrono::milliseconds(0)) noexcept;
LENS_ABI_NAMESPACE_END

#define LENS_STEP_PHASE(phase) ::lens::StepPhaseScope LENS_INTERNAL_CONCAT(lens_step_phase_, __LINE__)(phase)

#else  // LENS_DISABLED

LENS_ABI_NAMESPACE_BEGIN
inline void end_step(std::int64_t) noexcept {}
inline bool straggler_summary_due(std::int64_t) noexcept { return false; }
inline StragglerSummary take_straggler_summary(std::int64_t, int, int = 0) noexcept { return {}; }
inline bool score_stragglers(std::int64_t, std::span<const StragglerSummary>) noexcept { return false; }
inline std::optional<StragglerFindings> take_straggler_findings(
    std::chrono::milliseconds = std::chrono::milliseconds(0)) noexcept {
  return std::nullopt;
}
LENS_ABI_NAMESPACE_END
#define LENS_STEP_PHASE(phase) static_cast<void>(sizeof(phase))

#endif

}  // namespace lens
