// Hang snapshots: where every thread of a rank is, written as `rank<R>.snapshot.json` beside the run's telemetry
// when the rank is asked (P_HANG_SIGNAL, SIGUSR1 by default) or when its watchdog sees no iteration boundary for
// P_HANG_TIMEOUT seconds. `lens hang RUN_DIR` reads them and names the rank that is behind, and where.
//
// The pieces: the training thread reports each iteration boundary (at_iteration_boundary, lens/control.h) to the
// progress below; the hang watch (hang/hang_watch.h) runs the watchdog and writes the file from
// SpanDrain::open_spans(), never from a signal handler. The file (CONTRACT §10):
//
//   {"lens_hang_snapshot": 1, "rank": 3, "world_size": 4, "pid": 812, "host": "node7", "run_id": "...",
//    "reason": "signal" | "watchdog", "exporting": false, "written_unix_nano": ...,
//    "last_iteration_completed": 56, "seconds_since_iteration_boundary": 312.4,
//    "threads": [{"tid": 812, "name": "pretrain_gpt", "open_spans": [   // outermost first
//        {"name": "megatron.train_step", "group": "step", "start_unix_nano": ..., "open_seconds": 312.9,
//         "trace_id": "...", "span_id": "...", "parent_span_id": "...", "attributes": {"iteration": 57}}, ...]}]}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trace/span_drain.h"

namespace lens::internal {

// What a rank's snapshot says about itself; fixed at setup.
struct HangSettings {
  std::string path;  // <FILE_DIR>/<run id>/rank<R>.snapshot.json; empty: no snapshots
  int rank = 0;
  int world_size = 1;
  std::string run_id;
  bool exporting = false;
  std::int64_t timeout_ms = 0;           // the watchdog (0: off)
  std::vector<std::string> group_names;  // by span group id
  std::string process_path;              // <FILE_DIR>/<run id>/rank<R>.process.json: where the rank says who it is
  int signal = 0;                        // the hang signal (0: none; the watchdog only)
};

// The iteration boundaries the training thread reports (any thread reads them).
void note_iteration_boundary(std::int64_t iteration) noexcept;
struct IterationProgress {
  std::int64_t iteration = -1;       // the iteration about to start at the last boundary (-1: none yet)
  std::uint64_t boundary_nanos = 0;  // steady_nanos() of that boundary (0: none yet)
};
IterationProgress iteration_progress() noexcept;
void reset_iteration_progress() noexcept;  // a new setup

// The snapshot's text, from the open spans of `spans` now.
std::string hang_snapshot_json(const HangSettings& settings, const SpanDrain& spans, std::string_view reason);
// Writes it (under a temporary name, renamed). False, with a warning logged, when it could not.
bool write_hang_snapshot(const HangSettings& settings, const SpanDrain& spans, std::string_view reason);

// The rank's process record, written once when its hang watch starts (after the hang signal has its handler): what
// `lens hang RUN_DIR --signal` needs to signal exactly this run's rank processes on a host, and nothing else
// (CONTRACT §10):
//   {"lens_rank_process": 1, "rank": 3, "pid": 812, "host": "node7", "run_id": "...", "boot_id": "...",
//    "start_ticks": 123456, "comm": "pretrain_gpt", "hang_signal": "SIGUSR1" | "SIGUSR2" | "none"}
// Written when the rank's hang thread starts, removed when it ends (with the run directory, when that is left
// empty): a rank that ended cleanly leaves none; one that was killed leaves one that `lens hang --signal` finds
// names a process that is gone.
std::string rank_process_json(const HangSettings& settings);
bool write_rank_process_record(const HangSettings& settings);
void remove_rank_process_record(const HangSettings& settings) noexcept;

}  // namespace lens::internal
