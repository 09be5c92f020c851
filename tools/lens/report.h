// `lens report`: what a person asks first about a run, from its files (CONTRACT §10): who wrote it, each span
// name's count and duration percentiles over all ranks, the step time of every iteration per rank, where a step's
// time goes (phases), which rank the others wait for (stragglers), the pipeline bubble of every stage beside its
// theoretical value, the first iteration, checkpoints and evaluations, the training loss and metrics, and what was
// lost. Built while the files stream by; memory holds the figures (a record per rank and iteration), not the spans.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
#if defined(__GLIBC__)  // defined by the C library's headers above
#include <malloc.h>
#endif

#include "clocks.h"
#include "figures.h"
#include "run_reader.h"
#include "span_kinds.h"

namespace lens_tools {

// Durations of one span name: exact up to kExactLimit values, then a histogram of 1 % wide buckets (percentiles
// within 1 %), so memory stays bounded on a run of any length.
class Durations {
 public:
  static constexpr std::size_t kExactLimit = 1 << 16;
  explicit Durations(std::size_t order = 0) : order_(order) {}
  void add(std::uint64_t ns);
  // Adds another's durations: the same figures as if they had been added here one by one.
  void merge(Durations&& other);
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return count_ > 0 ? static_cast<double>(total_) / static_cast<double>(count_) : 0.0; }
  // Nearest-rank percentile, q in (0, 1].
  std::uint64_t percentile(double q);
  // When its name was first read, among the names of its map (what keeps the first kMaxSpanNames in a merge).
  std::size_t order() const noexcept { return order_; }

 private:
  void to_buckets();

  std::vector<std::uint64_t> exact_;
  bool sorted_ = true;
  std::map<int, std::uint64_t> buckets_;  // once past the limit
  std::uint64_t count_ = 0, max_ = 0;
  __extension__ using Total = unsigned __int128;  // GCC's and Clang's: ISO C++ has no 128-bit integer
  Total total_ = 0;                               // exact, so that the mean does not depend on the order of the adds
  std::size_t order_ = 0;
};

// The most distinct span names a report keeps (a run of lens's has about 60); spans of further names are counted
// under kOtherSpanNames.
inline constexpr std::size_t kMaxSpanNames = 10000;
inline constexpr std::string_view kOtherSpanNames = "(other span names)";

struct StepRange {
  std::int64_t first = 0, last = INT64_MAX;
  bool contains(std::int64_t it) const noexcept { return it >= first && it <= last; }
};

// What one rank did in one iteration: 88 bytes, since a report holds one a rank and iteration (85 M of them for
// 256 ranks of 10 M spans each).
struct StepRecord {
  std::uint32_t iteration = 0;     // below 2^32 (a larger number is no iteration: Report::span)
  std::int32_t microbatches = -1;  // the most a forward-backward span of the step said (within [-1, INT32_MAX])
  std::uint64_t step_ns = 0;       // 0: no step span
  std::uint64_t forward_backward_ns = 0;
  std::uint64_t forward_backward_start_ns = 0, forward_backward_end_ns = 0;  // in the rank's clock
  std::array<std::uint64_t, kPhaseCount> phase_ns{};
  // Adds the record of the same rank and iteration from files read later.
  void merge(const StepRecord& later) noexcept;
};
static_assert(sizeof(StepRecord) == 88);

// The device time of a rank's phases in one iteration (their device spans), kept apart: most runs have none.
struct DevicePhaseRecord {
  std::uint32_t iteration = 0;
  std::array<std::uint64_t, kPhaseCount> phase_ns{};
  void merge(const DevicePhaseRecord& later) noexcept {
    for (std::size_t k = 0; k < kPhaseCount; ++k) phase_ns[k] += later.phase_ns[k];
  }
};

// Room for one more element, a quarter more at a time rather than twice (a vector's own growth): for what a report
// holds a rank and iteration, where doubling left up to half of it empty.
template <typename T>
void make_room_for_one_more(std::vector<T>& v) {
  if (v.size() == v.capacity()) v.reserve(v.size() + v.size() / 4 + 16);
}

// Hands the memory this process freed back to the system where the C library can (glibc's malloc_trim: memory freed
// in another thread's malloc arena stays held otherwise); elsewhere nothing.
inline void give_freed_memory_back() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// A record of one iteration and the rank it is of (RecordsByRank::for_each_iteration).
template <typename Record>
struct RankedRecord {
  int rank;
  const Record* record;
  const Record* operator->() const noexcept { return record; }
};

// Records by rank, then iteration: a rank's records in a vector in iteration order, grown a quarter at a time. A
// rank's spans come in time order whatever the files' order (a file per rank, or a Collector's file of every rank's
// batches), so a record is nearly always appended. A map node a record would cost 80 bytes more than the record; a
// vector of each iteration's records in rank order would take the ranks of a Collector's file in any order, each
// moving those after it (quadratic in the ranks).
template <typename Record>
class RecordsByRank {
 public:
  // The record of `rank` in `iteration` (below 2^32), made when there is none.
  Record& at(std::int64_t iteration, int rank) {
    std::vector<Record>& records = by_rank_[rank];
    const auto number = static_cast<std::uint32_t>(iteration);
    if (records.empty() || records.back().iteration < number) return appended(records, number);
    auto it = lower_bound(records, number);
    if (it != records.end() && it->iteration == number) return *it;
    Record r;
    r.iteration = number;
    return *records.insert(it, r);
  }
  // The record of `rank` in `iteration`; null when there is none.
  const Record* find(std::int64_t iteration, int rank) const {
    const auto found = by_rank_.find(rank);
    if (found == by_rank_.end() || iteration < 0 || iteration > UINT32_MAX) return nullptr;
    const std::vector<Record>& records = found->second;
    auto it = lower_bound(records, static_cast<std::uint32_t>(iteration));
    return it != records.end() && it->iteration == iteration ? &*it : nullptr;
  }
  // Calls f(iteration, ranked) for each iteration in order, `ranked` its records (RankedRecord) in rank order.
  template <typename F>
  void for_each_iteration(F&& f) const;
  // Adds the records of files read after these: a rank's record of an iteration both have is merged (Record::merge).
  void merge(RecordsByRank&& later);
  bool empty() const noexcept { return by_rank_.empty(); }
  // The ranks with a record.
  std::vector<int> ranks() const {
    std::vector<int> out;
    out.reserve(by_rank_.size());
    for (const auto& entry : by_rank_) out.push_back(entry.first);
    return out;
  }

 private:
  // A rank's records (const or not) from the first at or after `iteration`.
  template <typename Records>
  static auto lower_bound(Records& records, std::uint32_t iteration) {
    return std::lower_bound(records.begin(), records.end(), iteration,
                            [](const Record& r, std::uint32_t wanted) { return r.iteration < wanted; });
  }
  static Record& appended(std::vector<Record>& records, std::uint32_t iteration) {
    make_room_for_one_more(records);
    Record& r = records.emplace_back();
    r.iteration = iteration;
    return r;
  }
  std::map<int, std::vector<Record>> by_rank_;
};

template <typename Record>
template <typename F>
void RecordsByRank<Record>::for_each_iteration(F&& f) const {
  // A merge of the ranks' sequences: a heap of their next records, the lowest iteration (then rank) on top.
  struct Cursor {
    int rank;
    const Record* at;
    const Record* end;
  };
  const auto later = [](const Cursor& a, const Cursor& b) {
    return a.at->iteration != b.at->iteration ? a.at->iteration > b.at->iteration : a.rank > b.rank;
  };
  std::vector<Cursor> heap;
  for (const auto& [rank, records] : by_rank_)
    if (!records.empty()) heap.push_back({rank, records.data(), records.data() + records.size()});
  std::make_heap(heap.begin(), heap.end(), later);
  std::vector<RankedRecord<Record>> ranked;
  while (!heap.empty()) {
    const std::uint32_t iteration = heap.front().at->iteration;
    ranked.clear();
    while (!heap.empty() && heap.front().at->iteration == iteration) {
      std::pop_heap(heap.begin(), heap.end(), later);
      Cursor& c = heap.back();
      ranked.push_back({c.rank, c.at});
      if (++c.at == c.end) {
        heap.pop_back();
      } else {
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    f(static_cast<std::int64_t>(iteration), ranked);
  }
}

template <typename Record>
void RecordsByRank<Record>::merge(RecordsByRank&& later) {
  std::size_t copied = 0;
  for (auto& [rank, records] : later.by_rank_) {
    auto [mine, fresh] = by_rank_.try_emplace(rank, std::move(records));  // a rank only the later files have: moved
    if (fresh || records.empty()) continue;
    std::vector<Record>& into = mine->second;
    if (into.empty() || into.back().iteration < records.front().iteration) {  // a later part of the rank's time
      into.insert(into.end(), records.begin(), records.end());
    } else {
      for (const Record& r : records) at(r.iteration, rank).merge(r);
    }
    std::vector<Record>().swap(records);
    // The later report's records were allocated by its own thread, in a malloc arena this thread does not allocate
    // from: what they free there goes back to the system as the merge goes, or this thread's grown records and the
    // later ones' freed memory would both be held at the end.
    if (++copied % 64 == 0) give_freed_memory_back();
  }
  later.by_rank_.clear();
  if (copied > 0) give_freed_memory_back();
}

// A step of one process, in its clock: what a timeline selects spans by.
struct StepWindow {
  std::uint64_t start_ns = 0, end_ns = 0;
  std::int64_t iteration = 0;
};

class Report : public RunVisitor {
 public:
  explicit Report(StepRange steps = {}) : steps_(steps) {}
  void span(const SpanRow& span) override;
  void metric(const MetricPoint& point) override;

  // Reads `files` into this report. With more than one thread (ReadOptions::threads) and files of comparable size,
  // each thread reads a run of consecutive files into a report of its own, start to end, and the reports are merged
  // in the files' order: no line or row crosses a core. One large plain file is read so in parts, cut at line starts
  // (line_starts_for_parts). Otherwise read_run (one file's lines parsed in parallel).
  ReadStats read(const std::vector<std::string>& files, const ReadOptions& options);
  // Adds a report of files read after this one's: the figures are those of one report that read them all.
  void merge(Report&& later);

  // The figures (what --json prints, the text form and the HTML page show). `series`: also every rank's step
  // time by iteration (the HTML page's chart).
  Figures figures(const ReadStats& read, bool series = false);

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
    bool device = false;         // a device span of the phase: its step is the one it starts in (the GPU runs behind)
    bool backward_pass = false;  // kTensorParallelWait: taken out of backward (else forward)
  };
  // When a process trained (megatron.* spans only: a checkpoint worker's are not the job's), for goodput; its steps
  // are the process's step windows (a step span is a megatron.* span).
  struct Timeline {
    std::uint64_t first_ns = UINT64_MAX, last_ns = 0;
    std::uint64_t save_ns = 0, evaluate_ns = 0;
  };
  struct Process {
    int rank = -1;
    std::string key;
    Timeline timeline;
    std::vector<StepWindow> steps;  // in time order; grown by a quarter at a time (one a rank and iteration)
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

  // What the report does with the spans of one name, worked out at the name's first span: a run has a few dozen
  // names and millions of spans, and matching each span's name against every rule was a third of the report's work.
  struct NameClass {
    Durations* durations = nullptr;  // where its durations go (under kOtherSpanNames past kMaxSpanNames)
    bool other_name = false;         // counted under kOtherSpanNames
    bool device = false;             // a device span: beside its host span's name, in its host span's phase
    bool megatron = false;           // a megatron.* span: when the process trained (goodput)
    bool step = false;               // a step span
    int part = kNoPart;              // step_part() (of the host span's name for a device span)
    int event = -1;                  // an EventKind
  };
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept { return std::hash<std::string_view>{}(name); }
  };
  // Classes kept, at most: past it (a file of endless names) a name is classified at each span, as before.
  static constexpr std::size_t kMaxNameClasses = 2 * kMaxSpanNames;

  const NameClass& name_class(std::string_view name);
  NameClass classify(std::string_view name);
  void merge_durations(std::map<std::string, Durations, std::less<>>& into,
                       std::map<std::string, Durations, std::less<>>&& later);
  static void merge_process(Process& into, Process&& later);
  Process& process_of(const SpanRow& s);
  void identity(const Origin& o);
  void step(Process& p, const SpanRow& s);
  void device_span(Process& p, const NameClass& c, const SpanRow& s);
  // The durations of `name` (kOtherSpanNames' past kMaxSpanNames names: `other_name` is then set).
  Durations& durations_of(std::map<std::string, Durations, std::less<>>& by_name, std::string_view name,
                          bool& other_name);
  bool place(Process& p, const Pending& item);
  void settle();
  // The parts of figures(), each from the records.
  std::vector<SpanFigures> span_figures();
  std::vector<StepFigures> step_figures(std::map<int, std::vector<Figure>>* by_rank) const;
  PhaseFigures phase_figures() const;
  StragglerFigures straggler_figures() const;
  GoodputFigures goodput_figures() const;
  void note_time(Process& p, const NameClass& c, const SpanRow& s);
  std::vector<BubbleRow> bubble_figures(const ClockFigures& clocks) const;
  std::vector<CheckpointFigures> checkpoint_figures() const;
  std::vector<EvaluationFigures> evaluation_figures() const;
  std::map<std::string, TrainingSeries> training_figures();
  std::vector<GroupChangeFigures> group_change_figures() const;
  LostFigures lost_figures() const;
  int stage_of(int rank) const;
  int replica_of(int rank) const;
  int tensor_rank_of(int rank) const;
  // Why a phase (or kForwardBackward) has no figure: its spans never appeared in the read (their span group was
  // off, as under `default` or `per_step`); empty when it has one. A figure of 0 would be a wrong answer.
  std::string not_measured(int part) const;

  StepRange steps_;
  std::set<std::string> run_ids_, services_;
  std::set<int> ranks_;
  std::map<int, std::string> host_of_rank_;  // host.name, for the clock offsets
  ClockLinks clock_links_;
  int world_size_ = 0, pipeline_size_ = 0, data_parallel_size_ = 0, tensor_size_ = 1;
  std::map<std::string, Durations, std::less<>> durations_;
  std::map<std::string, Durations, std::less<>> device_durations_;  // by the host span's name
  std::map<std::string, Process> processes_;                        // by process_key()
  const Origin* last_origin_ = nullptr;  // spans come in batches of one process: its Process, looked up once
  Process* last_process_ = nullptr;
  std::unordered_map<std::string, NameClass, NameHash, std::equal_to<>> name_classes_;
  NameClass unkept_class_;  // the class of a name past kMaxNameClasses, made again at each of its spans
  // By iteration, then rank: a record for each step seen (memory follows the steps in the files, not the largest
  // iteration number one claims).
  RecordsByRank<StepRecord> records_;
  RecordsByRank<DevicePhaseRecord> device_records_;    // only the records of a rank and iteration with device spans
  std::array<bool, kPhaseCount + 1> parts_seen_{};     // by step_part(): a span of that kind was read
  std::array<bool, kPhaseCount> device_parts_seen_{};  // a device span of that phase was read
  std::vector<Event> events_;
  std::int64_t first_iteration_ = INT64_MAX;
  std::uint64_t truncated_ = 0;
  std::uint64_t spans_of_other_names_ = 0;  // spans of names past kMaxSpanNames
  // Span-group changes (lens ctl) by the iteration they began at: the set, for how long, a restore; the ranks.
  std::map<std::int64_t, std::pair<SpanRow::GroupChange, std::set<int>>>
      group_changes_;  // the run's, whatever --steps says
  // lens's own counters: the last value of each (process, name, reason).
  struct CounterKey {
    std::string process;  // process_key(): a rank and its checkpoint worker count apart
    std::string name, reason;
    auto operator<=>(const CounterKey&) const = default;
  };
  std::map<CounterKey, LastValue> counters_;
  std::map<std::int64_t, double> loss_;  // by iteration: the step span's megatron.loss (the same on every rank)
  // Training metrics (megatron.training.*), by name and rank: (time, value) as recorded every log interval.
  std::map<std::string, std::map<int, std::vector<std::pair<std::uint64_t, double>>>> training_;
};

}  // namespace lens_tools
