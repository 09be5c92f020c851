// `lens report`: what a person asks first about a run, from its files (CONTRACT §10): who wrote it, each span
// name's count and duration percentiles over all ranks, the step time of every iteration per rank, where a step's
// time goes (phases), which rank the others wait for (stragglers), the pipeline bubble of every stage beside its
// theoretical value, the first iteration, checkpoints and evaluations, the training loss and metrics, and what was
// lost. Built while the files stream by; memory holds the figures (a record per rank and iteration), not the spans.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
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

// The most distinct span names a report keeps (a run of lens's has about 60); spans of further names are counted
// under kOtherSpanNames.
inline constexpr std::size_t kMaxSpanNames = 10000;
inline constexpr std::string_view kOtherSpanNames = "(other span names)";

struct StepRange {
  std::int64_t first = 0, last = INT64_MAX;
  bool contains(std::int64_t it) const noexcept { return it >= first && it <= last; }
};

// Where a step's time goes: the spans of these kinds inside a rank's step span, summed; `other` is the rest.
enum Phase { kForward, kBackward, kPipelineReceiveWait, kGradSyncWait, kOptimizer, kPhaseCount };
inline constexpr std::array<const char*, kPhaseCount> kPhaseNames = {"forward", "backward", "pipeline_receive_wait",
                                                                     "grad_sync_wait", "optimizer"};

// What one rank did in one iteration.
struct StepRecord {
  std::uint64_t step_ns = 0;  // 0: no step span
  std::uint64_t forward_backward_ns = 0;
  std::uint64_t forward_backward_start_ns = 0, forward_backward_end_ns = 0;  // in the rank's clock
  std::array<std::uint64_t, kPhaseCount> phase_ns{};
  std::int64_t microbatches = -1;
};

// A step of one process, in its clock: what a timeline selects spans by.
struct StepWindow {
  std::uint64_t start_ns = 0, end_ns = 0;
  std::int64_t iteration = 0;
};

// Thresholds of the straggler search (CONTRACT §10): a rank is flagged in a step when the robust z-score of its
// compute time within its pipeline stage is above kZ, and named when flagged in at least kShare of the steps scored.
struct StragglerRule {
  static constexpr double kZ = 3.5;
  static constexpr double kShare = 0.5;
  static constexpr int kMinRanksPerStage = 3;  // with fewer, a median/MAD score says nothing
};

class Report : public RunVisitor {
 public:
  explicit Report(StepRange steps = {}) : steps_(steps) {}
  void span(const SpanRow& span) override;
  void metric(const MetricPoint& point) override;

  // The figures, as `--json` prints them (the text form and the HTML page are made from this too).
  // `series`: also every rank's step time by iteration (the HTML page's chart).
  nlohmann::json figures(const ReadStats& read, bool series = false);

  // The step windows of the iterations in `range`, by process_key(): what a timeline keeps.
  std::map<std::string, std::vector<StepWindow>> windows(StepRange range) const;

 private:
  struct LastValue {
    std::uint64_t time_ns = 0;
    double value = 0;
  };
  // A span that counts toward a step, waiting for the step span that contains it (children end, and are written,
  // before their parent).
  struct Pending {
    std::uint64_t start_ns, end_ns;  // in the rank's clock
    int kind;                        // a Phase, or kForwardBackward
    std::int64_t microbatches;
  };
  struct Process {
    int rank = -1;
    std::string key;
    std::vector<StepWindow> steps;  // in time order
    // Spans that fit no step seen so far, by start: a step claims those that start inside it, and what starts
    // before the step two back is let go (each one is looked at a bounded number of times: linear in the input).
    std::multimap<std::uint64_t, Pending> pending;
  };
  // Spans outside steps that the report lists: each is few per run.
  struct Event {
    int kind;  // kSave, kWorkerWrite, kEvaluate
    int rank;
    std::uint64_t start_ns, end_ns;
    std::int64_t iteration;
    const Process* process;
  };

  void identity(const Origin& o);
  void step(Process& p, const SpanRow& s);
  bool place(Process& p, const Pending& item);
  void settle();
  nlohmann::json phases_json() const;
  nlohmann::json stragglers_json() const;
  nlohmann::json bubble_json() const;
  nlohmann::json events_json() const;
  int stage_of(int rank) const;
  int replica_of(int rank) const;
  // Why a phase (or kForwardBackward) has no figure: its spans never appeared in the read (their span group was
  // off, as under `default` or `per_step`); empty when it has one. A figure of 0 would be a wrong answer.
  std::string not_measured(int part) const;

  StepRange steps_;
  std::set<std::string> run_ids_, services_;
  std::set<int> ranks_;
  int world_size_ = 0, pipeline_size_ = 0, data_parallel_size_ = 0, tensor_size_ = 1;
  std::map<std::string, Durations, std::less<>> durations_;
  std::map<const Origin*, Process> processes_;
  // By iteration, then rank: a record for each step seen (memory follows the steps in the files, not the largest
  // iteration number one claims).
  std::map<std::int64_t, std::map<int, StepRecord>> records_;
  std::array<bool, kPhaseCount + 1> parts_seen_{};  // by step_part(): a span of that kind was read
  std::vector<Event> events_;
  std::int64_t first_iteration_ = INT64_MAX;
  std::uint64_t truncated_ = 0;
  std::uint64_t spans_of_other_names_ = 0;  // spans of names past kMaxSpanNames
  // Span-group changes (lens ctl) by the iteration they began at: the set, for how long, a restore; the ranks.
  std::map<std::int64_t, std::pair<SpanRow::GroupChange, std::set<int>>>
      group_changes_;                          // the run's, whatever --steps says
  std::map<std::string, LastValue> counters_;  // run, rank, pid, name, reason -> the last value
  std::map<std::int64_t, double> loss_;        // by iteration: the step span's megatron.loss (the same on every rank)
  // Training metrics (megatron.training.*), by name and rank: (time, value) as recorded every log interval.
  std::map<std::string, std::map<int, std::vector<std::pair<std::uint64_t, double>>>> training_;
};

// Text for a person.
// How the text form is laid out: the per-iteration table of a run of more than kStepRowsShown steps only when
// asked for (`--steps`).
inline constexpr std::size_t kStepRowsShown = 20;
struct TextOptions {
  bool every_step = false;
};
std::string render_text(const nlohmann::json& figures, const TextOptions& options = {});

// A figure of the JSON as a number: NaN where it is null (a non-finite value read from the files, or none).
inline double number_or_nan(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : std::nan(""); }

}  // namespace lens_tools
