// `lens hang RUN_DIR`: reads the hang snapshots a job's ranks wrote (rank<R>.snapshot.json, src/hang/snapshot.h)
// and says in one screen which rank is behind and where the others wait:
//
//   lens hang: 4 of 4 ranks wrote a snapshot (watchdog), within 0.4 s, in RUN_DIR
//   behind: rank 3 is in megatron.microbatch.forward (microbatch 2) at iteration 57 since 312 s, and never entered
//           megatron.grad_sync.finish
//     ranks 0-2 wait in megatron.grad_sync.finish at iteration 57 since 310 s
//     rank 3 is in megatron.microbatch.forward (microbatch 2) at iteration 57 since 312 s
//
// A rank whose snapshot is missing (stopped, dead, never signalled) is named: "rank 5: no snapshot".
#pragma once

#include <string>
#include <vector>

namespace lens_tools {

// Exit codes: 0 a verdict was written; 2 no snapshot under RUN_DIR, or one that cannot be read.
//
// Given several directories (one per node: each node writes its ranks' snapshots on its own disk), the snapshots of
// all are judged together; a directory that is missing or holds none is said, and its ranks are named as without a
// snapshot. Snapshots of two runs are refused (exit 2), naming both run ids.
int hang(const std::vector<std::string>& run_dirs, bool json);

// `lens hang RUN_DIR --signal`: sends the hang signal to exactly the run's rank processes on this host, as their
// records say (rank<R>.process.json, src/hang/snapshot.h), each checked to be the same process still (host boot,
// start time, name), never anything else; waits up to 10 s for their snapshots, then gives hang()'s verdict. A
// signal to a command line's pattern (pkill -f pretrain_gpt) also reaches the launcher (torchrun), which SIGUSR1
// ends. What was sent to whom, and why not, goes to stderr. Exit 2 when no rank here could be signalled.
int hang_signal(const std::vector<std::string>& run_dirs, bool json);

}  // namespace lens_tools
