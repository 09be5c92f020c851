// `lens report`: what a person asks first about a run, from its files (CONTRACT §10): who wrote it, each span
// name's count and duration percentiles over all ranks, the step time of every iteration per rank (median, max,
// the slowest rank), the training loss of every iteration (its step span's megatron.loss), and what was lost. Built
// while the files stream by; memory holds the figures, not the spans.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "run_reader.h"

namespace lens_tools {

// Durations of one span name: exact up to kExactLimit values, then a histogram of 1 % wide buckets (percentiles
// within 1 %), so memory stays bounded on a run of any length.
class Durations {
 public:
  static constexpr std::size_t kExactLimit = 1 << 16;
  void add(std::uint64_t ns);
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t max() const noexcept { return max_; }
  // Nearest-rank percentile, q in (0, 1].
  std::uint64_t percentile(double q);

 private:
  std::vector<std::uint64_t> exact_;
  bool sorted_ = true;
  std::map<int, std::uint64_t> buckets_;  // once past the limit
  std::uint64_t count_ = 0, max_ = 0;
};

struct StepRange {
  std::int64_t first = 0, last = INT64_MAX;
  bool contains(std::int64_t it) const noexcept { return it >= first && it <= last; }
};

class Report : public RunVisitor {
 public:
  explicit Report(StepRange steps = {}) : steps_(steps) {}
  void span(const SpanRow& span) override;
  void metric(const MetricPoint& point) override;

  // The figures, as `--json` prints them (the text form is made from this too).
  nlohmann::json figures(const ReadStats& read);

 private:
  struct LastValue {
    std::uint64_t time_ns = 0;
    double value = 0;
  };

  StepRange steps_;
  std::set<std::string> run_ids_, services_;
  std::set<int> ranks_;
  int world_size_ = 0, pipeline_size_ = 0, data_parallel_size_ = 0;
  std::map<std::string, Durations, std::less<>> durations_;
  // Step span durations by rank, each a column indexed by iteration (0: no step span): 8 bytes a rank and an
  // iteration, the least a per-rank step table can hold.
  std::map<int, std::vector<std::uint64_t>> step_ns_by_rank_;
  std::map<std::string, LastValue> counters_;  // run, rank, pid, name, reason -> the last value
  std::vector<double> loss_;  // by iteration: the step span's megatron.loss (the same on every rank); NaN: none
};

// Text for a person.
std::string render_text(const nlohmann::json& figures);

}  // namespace lens_tools
