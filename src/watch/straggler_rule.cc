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
  s.peer_compute_ns = median_of(compute);
  s.peer_wait_ns = median_of(wait);
  s.score = s.peer_compute_ns > 0 ? self.compute_ns / s.peer_compute_ns : 1.0;
  // The rank the others wait for waits least: without that, a slower rank may be one that waits on another
  // stage's straggler in a way its peers do not. With no wait measured in the whole stage (no pipeline, no data
  // parallelism to wait on), compute alone decides.
  const bool waits_least = self.wait_ns < s.peer_wait_ns || (s.peer_wait_ns == 0 && self.wait_ns == 0);
  s.flagged =
      s.score >= Rule::kComputeRatio && self.compute_ns - s.peer_compute_ns >= Rule::kMinExcessNs && waits_least;
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
