#include "watch/straggler_rule.h"

#include <algorithm>
#include <map>
#include <utility>

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

// One stage's peer values, sorted once: the median and least of "every value but one rank's" come by index in
// O(log n), so a stage of n ranks scores in O(n log n) (the job's scoring rank does it every window, at any scale).
class SortedValues {
 public:
  explicit SortedValues(std::vector<double> values) : v_(std::move(values)) { std::sort(v_.begin(), v_.end()); }
  std::size_t size() const { return v_.size(); }
  // The median and least of the values with one copy of `own` left out (it is one of them).
  double median_without(double own) const {
    const std::size_t skip = index_of(own), k = v_.size() - 1;
    return k % 2 == 1 ? at(k / 2, skip) : (at(k / 2 - 1, skip) + at(k / 2, skip)) / 2;
  }
  double least_without(double own) const { return at(0, index_of(own)); }

 private:
  std::size_t index_of(double own) const {
    return static_cast<std::size_t>(std::lower_bound(v_.begin(), v_.end(), own) - v_.begin());
  }
  double at(std::size_t i, std::size_t skip) const { return v_[i < skip ? i : i + 1]; }
  std::vector<double> v_;
};

struct Stage {
  SortedValues compute, wait;  // of its ranks with at least kMinSteps steps: the peers a rank is scored against
};

Score score_rank(const RankWindow& self, const Stage& stage) {
  Score s{.rank = self.rank,
          .stage = self.stage,
          .tensor_rank = self.tensor_rank,
          .compute_ns = self.compute_ns,
          .wait_ns = self.wait_ns};
  if (self.steps < Rule::kMinSteps || stage.compute.size() < 2) return s;  // too few steps, or no peer
  s.scored = true;
  const double least_peer_wait_ns = stage.wait.least_without(self.wait_ns);
  s.peer_compute_ns = stage.compute.median_without(self.compute_ns);
  s.peer_wait_ns = stage.wait.median_without(self.wait_ns);
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
  using Peers = std::pair<int, int>;  // stage, tensor-parallel rank
  std::map<Peers, std::pair<std::vector<double>, std::vector<double>>> values;
  for (const RankWindow& r : ranks) {
    auto& [compute, wait] = values[{r.stage, r.tensor_rank}];
    if (r.steps < Rule::kMinSteps) continue;
    compute.push_back(r.compute_ns);
    wait.push_back(r.wait_ns);
  }
  std::map<Peers, Stage> stages;
  for (auto& [peers, v] : values)
    stages.emplace(peers, Stage{SortedValues(std::move(v.first)), SortedValues(std::move(v.second))});
  std::vector<Score> out;
  out.reserve(ranks.size());
  for (const RankWindow& r : ranks) out.push_back(score_rank(r, stages.at({r.stage, r.tensor_rank})));
  return out;
}

}  // namespace lens::straggler
