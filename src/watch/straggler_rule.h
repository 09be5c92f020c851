// The straggler rule, one for the job and for `lens report` (CONTRACT §10): over a window of steps, each rank's
// median compute (forward + backward) and median wait (pipeline receive + gradient sync) against its stage's.
//
// In synchronous data and pipeline parallelism every rank's step lasts about as long as the slowest one's, so a
// straggler shows in how a step is split, not in its length: it computes longest and waits least, and its peers
// wait for it. A rank is flagged when its median compute is at least kComputeRatio times its peers' (the median
// of the other ranks of its stage) and more by kMinExcessNs, and its peers are seen waiting for it: they wait
// longer than it does by at least kWaitedForShare of its extra compute, and it waits no longer than its least-waiting
// peer but by that share (it waits for no one of its stage). Medians over a window
// see a rank slowed part of the time (a paused process, a noisy neighbour), which a per-step z-score misses; a
// peer's median works for a stage of 2, where a median/MAD over the stage says nothing.
//
//   std::vector<lens::straggler::RankWindow> ranks = ...;  // one per rank, medians over the same steps
//   for (const lens::straggler::Score& s : lens::straggler::score_window(ranks))
//     if (s.flagged) std::printf("rank %d computes %.2fx its peers'\n", s.rank, s.score);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lens::straggler {

struct Rule {
  // A rank slowed 40 % of the time computes about 1.6x its peers'; unslowed ranks on a shared 2-core machine
  // stay within 1.15x over 20 steps (docs/TOOLS.md).
  static constexpr double kComputeRatio = 1.3;
  // Below this, a ratio is timer noise on tiny steps.
  static constexpr double kMinExcessNs = 200'000;
  // The peers' extra wait over its extra compute. A straggler's peers wait for about all of it: 0.76-1.55 in every
  // window of a rank slowed or paused (tests/straggler, both trainers). Extra compute that fits in time the rank would
  // have spent waiting on a slow stage delays no one: its peers wait about as long as it does (0.31 for a 1.32x rank
  // behind a straggling stage in a CI run).
  static constexpr double kWaitedForShare = 0.5;
  // Fewer steps in a window: the medians are not scored (the job's windows have at least 5; `lens report`'s last
  // window may be short).
  static constexpr std::int64_t kMinSteps = 3;
};

// One rank over a window: the medians of its steps' compute and wait.
struct RankWindow {
  int rank = 0;
  int stage = 0;        // pipeline stage and
  int tensor_rank = 0;  // tensor-parallel rank: a rank is compared with the others of both (its replicas)
  std::int64_t steps = 0;
  double compute_ns = 0, wait_ns = 0;
};

// A rank against its peers over the window.
struct Score {
  int rank = 0, stage = 0, tensor_rank = 0;
  bool scored = false;   // false: alone in its stage, or too few steps
  bool flagged = false;  // the rule holds
  double score = 0;      // compute over the peers' median compute (1: as fast as they are)
  double compute_ns = 0, wait_ns = 0, peer_compute_ns = 0, peer_wait_ns = 0;
};

// Scores every rank of `ranks` (any order, one entry per rank) against the others of its stage and tensor-parallel
// rank. A tensor-parallel peer is no peer: the ranks of one layer wait for each other inside it, in its all-reduces.
std::vector<Score> score_window(std::span<const RankWindow> ranks);

// The median of `values` (0 for none); reorders them.
double median_of(std::vector<double>& values);

}  // namespace lens::straggler
