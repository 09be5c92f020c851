#include "watch/straggler_rule.h"

#include <algorithm>
#include <map>

namespace lens::straggler {

double median_of(std::vector<double>& values) {
  if (values.empty()) return 0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

namespace {

Score score_rank(const RankWindow& self, const std::vector<const RankWindow*>& stage) {
  Score s{.rank = self.rank, .stage = self.stage, .compute_ns = self.compute_ns, .wait_ns = self.wait_ns};
  std::vector<double> compute, wait;
  for (const RankWindow* peer : stage) {
    if (peer->rank == self.rank || peer->steps < Rule::kMinSteps) continue;
    compute.push_back(peer->compute_ns);
    wait.push_back(peer->wait_ns);
  }
  if (compute.empty() || self.steps < Rule::kMinSteps) return s;
  s.scored = true;
  const double least_peer_wait_ns = *std::min_element(wait.begin(), wait.end());
  s.peer_compute_ns = median_of(compute);
  s.peer_wait_ns = median_of(wait);
  s.score = s.peer_compute_ns > 0 ? self.compute_ns / s.peer_compute_ns : 1.0;
  // Its peers wait for its extra compute, and it waits for no one of its stage: without that, a slower rank may
  // be one whose extra compute fits in time it would have waited on another stage's straggler, or on a worse
  // straggler of its own stage, which delays no one. Its wait is then shorter than its peers' median by about its
  // extra compute, but far longer than the least-waiting peer's. In a stage of 2 the second test is the first. With
  // no wait measured in the whole stage (no pipeline, no data parallelism to wait on), compute alone decides.
  const double excess_ns = self.compute_ns - s.peer_compute_ns;
  const double share_of_excess_ns = Rule::kWaitedForShare * std::max(excess_ns, 0.0);
  const bool no_wait_in_stage = s.peer_wait_ns == 0 && self.wait_ns == 0;
  const bool waited_for = no_wait_in_stage || (s.peer_wait_ns - self.wait_ns >= share_of_excess_ns &&
                                               self.wait_ns - least_peer_wait_ns <= share_of_excess_ns);
  s.flagged = s.score >= Rule::kComputeRatio && excess_ns >= Rule::kMinExcessNs && waited_for;
  return s;
}

}  // namespace

std::vector<Score> score_window(std::span<const RankWindow> ranks) {
  std::map<int, std::vector<const RankWindow*>> by_stage;
  for (const RankWindow& r : ranks) by_stage[r.stage].push_back(&r);
  std::vector<Score> out;
  out.reserve(ranks.size());
  for (const RankWindow& r : ranks) out.push_back(score_rank(r, by_stage[r.stage]));
  return out;
}

}  // namespace lens::straggler
