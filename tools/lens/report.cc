#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

namespace lens_tools {
namespace {

constexpr double kBucketBase = 1.01;
constexpr std::int64_t kMaxIterations = std::int64_t{1} << 32;  // beyond: not a real iteration number

bool is_step_span(std::string_view name) {
  return name == "megatron.train_step" || name == "megatron.train.iteration";  // SPAN_NAMES documented, megatron
}

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string format_ms(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f" : v >= 1 ? "%.2f" : "%.3f", v);
  return text;
}

}  // namespace

void Durations::add(std::uint64_t ns) {
  ++count_;
  max_ = std::max(max_, ns);
  if (buckets_.empty() && exact_.size() < kExactLimit) {
    exact_.push_back(ns);
    sorted_ = false;
    return;
  }
  if (!exact_.empty()) {  // past the limit: move the exact values into the histogram once
    for (std::uint64_t v : exact_)
      ++buckets_[v == 0 ? -1 : static_cast<int>(std::floor(std::log(v) / std::log(kBucketBase)))];
    exact_.clear();
    exact_.shrink_to_fit();
  }
  ++buckets_[ns == 0 ? -1 : static_cast<int>(std::floor(std::log(ns) / std::log(kBucketBase)))];
}

std::uint64_t Durations::percentile(double q) {
  if (count_ == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  const std::uint64_t target = std::max<std::uint64_t>(rank, 1);
  if (buckets_.empty()) {
    if (!sorted_) std::sort(exact_.begin(), exact_.end());
    sorted_ = true;
    return exact_[target - 1];
  }
  std::uint64_t seen = 0;
  for (const auto& [bucket, n] : buckets_) {
    seen += n;
    if (seen >= target)
      return bucket < 0 ? 0 : std::min(max_, static_cast<std::uint64_t>(std::pow(kBucketBase, bucket + 0.5)));
  }
  return max_;
}

namespace {

constexpr int kForwardBackward = kPhaseCount;  // a Pending kind beside the phases: the bubble's denominator
enum EventKind { kSave, kWorkerWrite, kEvaluate };

// What a span name counts toward in a step, or -1. Both name modes (CONTRACT §6): the micro-batch, pipeline and
// gradient-sync names are the same in both.
int step_part(std::string_view name) {
  if (name == "megatron.microbatch.forward") return kForward;
  if (name == "megatron.microbatch.backward") return kBackward;
  if (name.starts_with("megatron.p2p.recv_")) return kPipelineReceiveWait;
  if (name == "megatron.grad_sync.finish") return kGradSyncWait;
  if (name == "megatron.optimizer_step" || name == "megatron.train.iteration.optimizer") return kOptimizer;
  if (name == "megatron.forward_backward" || name == "megatron.train.iteration.forward_backward")
    return kForwardBackward;
  return -1;
}

int event_kind(std::string_view name) {
  if (name == "megatron.save_checkpoint" || name == "megatron.checkpoint.save") return kSave;
  if (name == "nvrx.checkpoint.save.write") return kWorkerWrite;
  if (name == "megatron.evaluate") return kEvaluate;
  return -1;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

void Report::identity(const Origin& o) {
  if (!o.run_id.empty()) run_ids_.insert(o.run_id);
  if (!o.service.empty()) services_.insert(o.service);
  if (o.rank >= 0) ranks_.insert(o.rank);
  world_size_ = std::max(world_size_, o.world_size);
  pipeline_size_ = std::max(pipeline_size_, o.pipeline_size);
  data_parallel_size_ = std::max(data_parallel_size_, o.data_parallel_size);
  tensor_size_ = std::max(tensor_size_, o.tensor_size);
}

void Report::span(const SpanRow& s) {
  const Origin& o = *s.origin;
  identity(o);
  Process& p = processes_[s.origin];
  if (p.key.empty()) p.rank = o.rank, p.key = process_key(o);
  if (s.truncated) ++truncated_;
  if (s.group_change && s.iteration >= 0) {
    auto& [change, ranks] = group_changes_[s.iteration];
    change = *s.group_change;
    ranks.insert(o.rank);
  }
  if (is_step_span(s.name) && s.iteration >= 0 && s.iteration < kMaxIterations) {
    if (!s.truncated) step(p, s);  // a step cut short by shutdown is not a step's time
  } else if (const int part = step_part(s.name); part >= 0) {
    parts_seen_[static_cast<std::size_t>(part)] = true;
    const Pending item{s.start_ns, s.end_ns, part, s.num_microbatches};
    if (!place(p, item)) p.pending.emplace(item.start_ns, item);
  } else if (const int kind = event_kind(s.name); kind >= 0) {
    events_.push_back({kind, o.rank, s.start_ns, s.end_ns, s.iteration, &p});
  }
  auto it = durations_.find(s.name);
  if (it == durations_.end()) {
    // Memory follows the names, which a file can make endless (200 k names took 362 MB): past kMaxSpanNames,
    // spans of new names are counted under one.
    const bool room = durations_.size() < kMaxSpanNames;
    if (!room) ++spans_of_other_names_;
    it = durations_.try_emplace(room ? std::string(s.name) : std::string(kOtherSpanNames)).first;
  }
  it->second.add(s.duration_ns());
}

void Report::step(Process& p, const SpanRow& s) {
  if (s.loss) loss_[s.iteration] = *s.loss;
  first_iteration_ = std::min(first_iteration_, s.iteration);
  const StepWindow window{s.start_ns, s.end_ns, s.iteration};
  auto where = std::upper_bound(p.steps.begin(), p.steps.end(), window.start_ns,
                                [](std::uint64_t t, const StepWindow& w) { return t < w.start_ns; });
  p.steps.insert(where, window);  // nearly always at the end
  if (steps_.contains(s.iteration)) records_[s.iteration][p.rank].step_ns = std::max<std::uint64_t>(s.duration_ns(), 1);
  // Claim what waited for this step; what ended before the step two back belongs to no step (an evaluation's
  // micro-batches, the first iteration's setup) and is let go, so that pending stays small.
  const std::uint64_t horizon = p.steps.size() >= 3 ? p.steps[p.steps.size() - 3].start_ns : 0;
  for (auto it = p.pending.lower_bound(window.start_ns); it != p.pending.end() && it->first <= window.end_ns;)
    it = place(p, it->second) ? p.pending.erase(it) : std::next(it);
  p.pending.erase(p.pending.begin(), p.pending.lower_bound(horizon));
}

// Adds `item` to the record of the step of `p` that contains it; false when no known step does.
bool Report::place(Process& p, const Pending& item) {
  auto after = std::upper_bound(p.steps.begin(), p.steps.end(), item.start_ns,
                                [](std::uint64_t t, const StepWindow& w) { return t < w.start_ns; });
  if (after == p.steps.begin()) return false;
  const StepWindow& w = *std::prev(after);
  if (item.end_ns > w.end_ns) return false;
  if (!steps_.contains(w.iteration)) return true;
  StepRecord& r = records_[w.iteration][p.rank];
  const std::uint64_t ns = item.end_ns > item.start_ns ? item.end_ns - item.start_ns : 0;
  if (item.kind == kForwardBackward) {
    r.forward_backward_ns += ns;
    r.forward_backward_start_ns = item.start_ns;
    r.forward_backward_end_ns = item.end_ns;
    r.microbatches = std::max(r.microbatches, item.microbatches);
  } else {
    r.phase_ns[static_cast<std::size_t>(item.kind)] += ns;
  }
  return true;
}

void Report::settle() {
  for (auto& process : processes_) {
    Process& p = process.second;  // a name of its own: a lambda may not capture a structured binding (clang 14)
    std::erase_if(p.pending, [&](const auto& entry) { return place(p, entry.second); });
  }
}

void Report::metric(const MetricPoint& p) {
  const Origin& o = *p.origin;
  if (p.name == "lens.spans.exported" || p.name == "lens.spans.dropped") {
    // Cumulative per process: its last value counts (a rank and its checkpoint worker are two processes).
    LastValue& last = counters_[process_key(o) + '\x1f' + std::string(p.name) + '\x1f' + std::string(p.reason)];
    if (p.time_ns >= last.time_ns) last = {p.time_ns, p.value};
  } else if (p.name.starts_with("megatron.training.")) {
    training_[std::string(p.name)][o.rank].emplace_back(p.time_ns, p.value);
  }
}

int Report::stage_of(int rank) const {
  // Megatron's rank order (tensor fastest, then data, then pipeline), which pretrain_gpt follows too.
  // Sizes are within [1, kMaxRanks] (run_reader), so the product fits and the quotient is an int.
  const std::int64_t per_stage = std::int64_t{std::max(1, tensor_size_)} * std::max(1, data_parallel_size_);
  return pipeline_size_ > 1 ? static_cast<int>(rank / per_stage) : 0;
}

int Report::replica_of(int rank) const { return rank / std::max(1, tensor_size_) % std::max(1, data_parallel_size_); }

std::map<std::string, std::vector<StepWindow>> Report::windows(StepRange range) const {
  std::map<std::string, std::vector<StepWindow>> out;
  for (const auto& [origin, p] : processes_)
    for (const StepWindow& w : p.steps)
      if (range.contains(w.iteration)) out[p.key].push_back(w);
  return out;
}

std::string Report::not_measured(int part) const {
  if (parts_seen_[static_cast<std::size_t>(part)]) return {};
  // One data-parallel replica has no gradient all-reduce to wait for, one stage nothing to receive: 0 is the true
  // figure there.
  if (part == kGradSyncWait && data_parallel_size_ == 1) return {};
  if (part == kPipelineReceiveWait && pipeline_size_ == 1) return {};
  struct Need {
    const char* spans;
    const char* group;
  };
  static constexpr std::array<Need, kPhaseCount + 1> kNeeds = {{
      {"megatron.microbatch.forward/backward", "microbatch"},
      {"megatron.microbatch.forward/backward", "microbatch"},
      {"megatron.p2p.recv_*", "communication"},
      {"megatron.grad_sync.finish", "communication"},
      {"megatron.optimizer_step", "optimizer"},
      {"megatron.forward_backward", "forward_backward"},
  }};
  const Need& need = kNeeds[static_cast<std::size_t>(part)];
  return std::string("no ") + need.spans + " spans: needs span group '" + need.group + "' (on under 'all')";
}

nlohmann::json Report::phases_json() const {
  using nlohmann::json;
  json per_rank = json::array();
  std::array<double, kPhaseCount> all_sum{};
  double all_step = 0, all_steps = 0;
  struct RankSums {
    std::array<double, kPhaseCount> phase{};
    double step = 0, n = 0;
  };
  std::map<int, RankSums> sums;
  for (const auto& [iteration, by_rank] : records_)
    for (const auto& [rank, r] : by_rank) {
      if (r.step_ns == 0) continue;
      RankSums& t = sums[rank];
      ++t.n;
      t.step += ms(r.step_ns);
      for (int k = 0; k < kPhaseCount; ++k) t.phase[k] += ms(r.phase_ns[k]);
    }
  json unmeasured = json::object();
  for (int k = 0; k < kPhaseCount; ++k)
    if (std::string why = not_measured(k); !why.empty()) unmeasured[kPhaseNames[k]] = why;
  // A phase with no figure is null, never 0; `other` is then the step less what was measured.
  auto figure = [&](int k, double value) { return unmeasured.contains(kPhaseNames[k]) ? json(nullptr) : json(value); };
  for (const auto& [rank, t] : sums) {
    json row = {{"rank", rank}, {"steps", t.n}, {"step_ms", t.step / t.n}};
    double accounted = 0;
    for (int k = 0; k < kPhaseCount; ++k) {
      row[std::string(kPhaseNames[k]) + "_ms"] = figure(k, t.phase[k] / t.n);
      accounted += t.phase[k];
      all_sum[k] += t.phase[k];
    }
    row["other_ms"] = std::max(0.0, t.step - accounted) / t.n;
    per_rank.push_back(row);
    all_step += t.step;
    all_steps += t.n;
  }
  json all = {{"steps", all_steps}, {"step_ms", all_steps > 0 ? all_step / all_steps : 0.0}};
  double accounted = 0;
  for (int k = 0; k < kPhaseCount; ++k) {
    all[std::string(kPhaseNames[k]) + "_ms"] = figure(k, all_steps > 0 ? all_sum[k] / all_steps : 0.0);
    accounted += all_sum[k];
  }
  all["other_ms"] = all_steps > 0 ? std::max(0.0, all_step - accounted) / all_steps : 0.0;
  return {{"mean_per_step", all}, {"per_rank", per_rank}, {"not_measured", unmeasured}};
}

// Per step, each rank's compute (forward + backward) against the others of its pipeline stage: robust z-score
// 0.6745 (x - median) / MAD. The rank the others wait for computes longest and waits least.
nlohmann::json Report::stragglers_json() const {
  using nlohmann::json;
  std::map<int, std::vector<int>> stage_ranks;
  std::set<int> ranks_with_steps;
  for (const auto& [iteration, by_rank] : records_)
    for (const auto& [rank, r] : by_rank) ranks_with_steps.insert(rank);
  for (int rank : ranks_with_steps) stage_ranks[stage_of(rank)].push_back(rank);
  struct Tally {
    int scored = 0, flagged = 0;
    std::vector<double> compute, wait, stage_compute, stage_wait;
  };
  std::map<int, Tally> tally;
  std::vector<int> unscored_stages;
  // Compute is the micro-batches' forward and backward: without their spans every rank would score 0.
  std::string not_scored = not_measured(kForward);
  if (not_scored.empty()) not_scored = not_measured(kBackward);
  if (!not_scored.empty()) stage_ranks.clear();
  for (const auto& [stage, ranks] : stage_ranks) {
    if (static_cast<int>(ranks.size()) < StragglerRule::kMinRanksPerStage) {
      unscored_stages.push_back(stage);
      continue;
    }
    std::vector<double> compute, wait;
    std::vector<int> who;
    for (const auto& [iteration, by_rank] : records_) {
      compute.clear(), wait.clear(), who.clear();
      for (int rank : ranks) {
        const auto found = by_rank.find(rank);
        if (found == by_rank.end() || found->second.step_ns == 0) continue;
        const StepRecord& r = found->second;
        compute.push_back(ms(r.phase_ns[kForward] + r.phase_ns[kBackward]));
        wait.push_back(ms(r.phase_ns[kPipelineReceiveWait] + r.phase_ns[kGradSyncWait]));
        who.push_back(rank);
      }
      if (static_cast<int>(who.size()) < StragglerRule::kMinRanksPerStage) continue;
      const double median = median_of(compute), median_wait = median_of(wait);
      std::vector<double> deviation;
      for (double c : compute) deviation.push_back(std::abs(c - median));
      // A floor under MAD: ranks that agree to the microsecond would make any difference infinitely significant.
      const double mad = std::max({median_of(deviation), 0.01 * median, 0.001});
      for (std::size_t i = 0; i < who.size(); ++i) {
        Tally& t = tally[who[i]];
        ++t.scored;
        if (0.6745 * (compute[i] - median) / mad > StragglerRule::kZ) ++t.flagged;
        t.compute.push_back(compute[i]);
        t.wait.push_back(wait[i]);
        t.stage_compute.push_back(median);
        t.stage_wait.push_back(median_wait);
      }
    }
  }
  json ranks = json::array(), named = json::array();
  for (const auto& [rank, t] : tally) {
    const double share = t.scored > 0 ? static_cast<double>(t.flagged) / t.scored : 0;
    json row = {{"rank", rank},
                {"stage", stage_of(rank)},
                {"steps_scored", t.scored},
                {"steps_flagged", t.flagged},
                {"share", share},
                {"compute_ms_median", number_or_null(median_of(t.compute))},
                {"stage_compute_ms_median", number_or_null(median_of(t.stage_compute))},
                {"wait_ms_median", number_or_null(median_of(t.wait))},
                {"stage_wait_ms_median", number_or_null(median_of(t.stage_wait))}};
    ranks.push_back(row);
    if (t.scored > 0 && share >= StragglerRule::kShare) named.push_back(row);
  }
  return {{"rule",
           {{"z_above", StragglerRule::kZ},
            {"share_at_least", StragglerRule::kShare},
            {"min_ranks_per_stage", StragglerRule::kMinRanksPerStage}}},
          {"ranks", ranks},
          {"named", named},
          {"unscored_stages", unscored_stages},
          {"not_scored", not_scored.empty() ? json(nullptr) : json(not_scored)}};
}

// Per stage: the share of a pipeline's forward-backward time in which the stage is not computing micro-batches
// (median over the stage's ranks and steps), beside 1F1B's (P - 1) / (M + P - 1). A pipeline's time is from the first
// stage's forward-backward start to the last one's end in the same iteration and replica: a later stage's own span
// begins before its first micro-batch arrives but ends before the first stage's last backward, so the span alone
// would hide part of its bubble. The ranks' clocks are compared: skew between hosts adds to it.
nlohmann::json Report::bubble_json() const {
  using nlohmann::json;
  std::map<int, std::vector<double>> measured, microbatches;
  for (const auto& [iteration, by_rank] : records_) {
    std::map<int, std::pair<std::uint64_t, std::uint64_t>> window;  // replica -> [first start, last end]
    for (const auto& [rank, r] : by_rank) {
      if (r.forward_backward_ns == 0) continue;
      auto [w, fresh] = window.try_emplace(replica_of(rank), r.forward_backward_start_ns, r.forward_backward_end_ns);
      w->second.first = std::min(w->second.first, r.forward_backward_start_ns);
      w->second.second = std::max(w->second.second, r.forward_backward_end_ns);
    }
    for (const auto& [rank, r] : by_rank) {
      if (r.forward_backward_ns == 0) continue;
      const auto& [first, last] = window.at(replica_of(rank));
      const double compute = static_cast<double>(r.phase_ns[kForward] + r.phase_ns[kBackward]);
      const double span = static_cast<double>(std::max<std::uint64_t>(last - first, 1));
      measured[stage_of(rank)].push_back(std::clamp(1.0 - compute / span, 0.0, 1.0));
      if (r.microbatches > 0) microbatches[stage_of(rank)].push_back(static_cast<double>(r.microbatches));
    }
  }
  json out = json::array();
  const int p = std::max(1, pipeline_size_);
  // Not computing is the forward-backward less the micro-batches' forward and backward: without their spans it
  // would be all of it.
  std::string unmeasured = not_measured(kForward);
  if (unmeasured.empty()) unmeasured = not_measured(kBackward);
  for (const auto& [stage, values] : measured) {
    const double m = median_of(microbatches[stage]);
    json row = {{"stage", stage},
                {"steps", values.size()},
                {"microbatches", number_or_null(m)},
                {"measured", unmeasured.empty() ? json(median_of(values)) : json(nullptr)},
                {"theoretical", std::isnan(m) ? json(nullptr) : json((p - 1) / (m + p - 1))}};
    if (!unmeasured.empty()) row["not_measured"] = unmeasured;
    out.push_back(row);
  }
  return out;
}

nlohmann::json Report::events_json() const {
  using nlohmann::json;
  // Checkpoints by iteration: the blocking save (slowest rank) and the worker's write that followed it.
  std::map<std::int64_t, std::pair<std::set<int>, std::pair<double, double>>> saves;
  std::map<int, std::vector<const Event*>> saves_by_rank;
  for (const Event& e : events_)
    if (e.kind == kSave && e.iteration >= 0) {
      auto& [ranks, times] = saves[e.iteration];
      ranks.insert(e.rank);
      times.first = std::max(times.first, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
      saves_by_rank[e.rank].push_back(&e);
    }
  for (const Event& e : events_) {
    if (e.kind != kWorkerWrite) continue;
    const Event* latest = nullptr;  // the rank's last save that began before this write
    for (const Event* save : saves_by_rank[e.rank])
      if (save->start_ns <= e.start_ns && (latest == nullptr || save->start_ns > latest->start_ns)) latest = save;
    if (latest != nullptr)
      saves[latest->iteration].second.second =
          std::max(saves[latest->iteration].second.second, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
  }
  json checkpoints = json::array();
  for (const auto& [iteration, entry] : saves)
    checkpoints.push_back({{"iteration", iteration},
                           {"ranks", entry.first.size()},
                           {"save_ms_max", entry.second.first},
                           {"async_write_ms_max", entry.second.second}});
  // Evaluations, after the iteration the rank finished last before each began.
  std::map<std::int64_t, std::pair<int, double>> evaluations;
  for (const Event& e : events_) {
    if (e.kind != kEvaluate) continue;
    std::int64_t after = 0;
    for (const StepWindow& w : e.process->steps)
      if (w.end_ns <= e.start_ns) after = std::max(after, w.iteration);
    auto& [ranks, longest] = evaluations[after];
    ++ranks;
    longest = std::max(longest, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
  }
  json evals = json::array();
  for (const auto& [after, entry] : evaluations)
    evals.push_back({{"after_iteration", after}, {"ranks", entry.first}, {"max_ms", entry.second}});
  return {{"checkpoints", checkpoints}, {"evaluations", evals}};
}

nlohmann::json Report::figures(const ReadStats& read, bool series) {
  using nlohmann::json;
  settle();
  json out;
  out["run"] = {{"run_ids", run_ids_},
                {"services", services_},
                {"ranks", ranks_},
                {"world_size", world_size_},
                {"pipeline_parallel_size", pipeline_size_},
                {"data_parallel_size", data_parallel_size_}};
  json spans = json::array();
  for (auto& [name, d] : durations_) {
    spans.push_back({{"name", name},
                     {"count", d.count()},
                     {"p50_ms", ms(d.percentile(0.50))},
                     {"p90_ms", ms(d.percentile(0.90))},
                     {"p99_ms", ms(d.percentile(0.99))},
                     {"max_ms", ms(d.max())}});
  }
  out["spans"] = spans;
  json steps = json::array();
  std::set<int> ranks_with_steps;
  for (const auto& [iteration, records] : records_)
    for (const auto& [rank, r] : records) ranks_with_steps.insert(rank);
  std::vector<double> times;
  json by_rank = json::object();
  for (const auto& [iteration, records] : records_) {
    times.clear();
    int slowest = -1;
    std::uint64_t longest = 0;
    for (const auto& [rank, r] : records) {
      if (r.step_ns == 0) continue;
      times.push_back(ms(r.step_ns));
      if (slowest < 0 || r.step_ns > longest) slowest = rank, longest = r.step_ns;
    }
    if (times.empty()) continue;
    steps.push_back({{"iteration", iteration},
                     {"ranks", times.size()},
                     {"median_ms", median_of(times)},
                     {"max_ms", ms(longest)},
                     {"slowest_rank", slowest}});
    if (series)
      for (int rank : ranks_with_steps) {
        const auto found = records.find(rank);
        const std::uint64_t ns = found == records.end() ? 0 : found->second.step_ns;
        by_rank[std::to_string(rank)].push_back(ns == 0 ? json(nullptr) : json(ms(ns)));
      }
  }
  out["steps"] = steps;
  if (series) out["step_ms_by_rank"] = by_rank;
  out["phases"] = phases_json();
  out["stragglers"] = stragglers_json();
  out["bubble"] = bubble_json();
  // The first iteration against the others: only when the step table starts at the run's first step.
  if (steps.size() >= 2 && steps[0]["iteration"].get<std::int64_t>() == first_iteration_) {
    std::vector<double> rest;
    for (std::size_t i = 1; i < steps.size(); ++i) rest.push_back(steps[i]["median_ms"].get<double>());
    const double first = steps[0]["median_ms"].get<double>(), typical = median_of(rest);
    out["first_iteration"] = {{"iteration", steps[0]["iteration"]},
                              {"step_ms", first},
                              {"later_median_ms", typical},
                              {"overhead_ms", first - typical}};
  } else {
    out["first_iteration"] = nullptr;
  }
  const json events = events_json();
  out["checkpoints"] = events["checkpoints"];
  out["evaluations"] = events["evaluations"];
  json loss = json::array();
  for (const auto& [iteration, value] : loss_)
    loss.push_back({{"iteration", iteration}, {"loss", number_or_null(value)}});
  out["loss"] = loss;
  json training = json::object();
  for (auto& [name, ranks] : training_) {  // the series of the lowest rank that records it
    auto& points = ranks.begin()->second;
    std::sort(points.begin(), points.end());
    json values = json::array();
    for (const auto& [time, value] : points) values.push_back(value);
    training[name] = {{"rank", ranks.begin()->first}, {"values", values}};
  }
  out["training_metrics"] = training;
  json changes = json::array();
  for (const auto& [iteration, entry] : group_changes_)
    changes.push_back({{"iteration", iteration},
                       {"span_groups", entry.first.span_groups},
                       {"for_iterations", entry.first.iterations},
                       {"restored", entry.first.restored},
                       {"ranks", entry.second.size()}});
  out["span_group_changes"] = changes;
  double exported = 0;
  std::map<std::string, double> dropped;
  for (const auto& [key, last] : counters_) {
    const auto reason_at = key.rfind('\x1f');
    const auto name_at = key.rfind('\x1f', reason_at - 1);
    const std::string name = key.substr(name_at + 1, reason_at - name_at - 1), reason = key.substr(reason_at + 1);
    if (name == "lens.spans.exported")
      exported += last.value;
    else
      dropped[reason] += last.value;
  }
  double dropped_total = 0;
  for (const auto& [reason, n] : dropped) dropped_total += n;
  out["lost"] = {{"spans_exported", exported},
                 {"spans_dropped", dropped_total},
                 {"dropped_by_reason", dropped},
                 {"spans_truncated", truncated_}};
  json problems = json::array();
  for (const ReadProblem& p : read.problems) problems.push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}});
  out["read"] = {{"files", read.files},
                 {"lines", read.lines},
                 {"bytes", read.bytes},
                 {"spans", read.spans},
                 {"spans_of_other_names", spans_of_other_names_},
                 {"problems", problems}};
  return out;
}

namespace {

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

std::string ms_or_dash(const nlohmann::json& v) { return v.is_number() ? format_ms(v.get<double>()) : "-"; }

// A series of at most 12 values, evenly picked, for a line of text.
std::string short_series(const std::vector<double>& values) {
  std::string out;
  const std::size_t n = values.size(), shown = std::min<std::size_t>(n, 12);
  char text[32];
  for (std::size_t i = 0; i < shown; ++i) {
    std::snprintf(text, sizeof text, "%s%.4g", out.empty() ? "" : " ",
                  values[shown == 1 ? 0 : i * (n - 1) / (shown - 1)]);
    out += text;
  }
  return out;
}

void render_analysis(const nlohmann::json& f, const std::function<void(const std::string&)>& line) {
  char buffer[512];
  const auto& phases = f["phases"]["mean_per_step"];
  if (phases["steps"].get<double>() > 0) {
    line("");
    std::snprintf(buffer, sizeof buffer, "where a step's time goes (mean per step over ranks, ms; step %s)",
                  format_ms(phases["step_ms"]).c_str());
    line(buffer);
    std::string row = " ";
    for (const char* name : kPhaseNames)
      row += std::string(" ") + name + " " + ms_or_dash(phases[std::string(name) + "_ms"]);
    line(row + " other " + format_ms(phases["other_ms"]));
    std::map<std::string, std::string> phases_by_reason;  // one line a reason: "forward, backward: ..."
    for (const char* name : kPhaseNames)
      if (const auto& why = f["phases"]["not_measured"].value(name, ""); !why.empty())
        phases_by_reason[why] += std::string(phases_by_reason[why].empty() ? "" : ", ") + name;
    for (const auto& [why, names] : phases_by_reason)
      line("  not measured (-): " + names + ": " + why + "; 'other' holds their time");
  }
  const auto& stragglers = f["stragglers"];
  if (!stragglers["ranks"].empty() || !stragglers["unscored_stages"].empty() || stragglers["not_scored"].is_string()) {
    line("");
    if (stragglers["not_scored"].is_string())
      line("stragglers: not scored: " + stragglers["not_scored"].get<std::string>());
    else if (stragglers["named"].empty())
      line("stragglers: none (no rank's compute stood out in its stage in half the steps)");
    for (const auto& r : stragglers["named"]) {
      std::snprintf(buffer, sizeof buffer,
                    "straggler: rank %d (stage %d), slowest of its stage in %d of %d steps: compute %s ms vs the "
                    "stage's %s, waits %s ms vs %s",
                    r["rank"].get<int>(), r["stage"].get<int>(), r["steps_flagged"].get<int>(),
                    r["steps_scored"].get<int>(), ms_or_dash(r["compute_ms_median"]).c_str(),
                    ms_or_dash(r["stage_compute_ms_median"]).c_str(), ms_or_dash(r["wait_ms_median"]).c_str(),
                    ms_or_dash(r["stage_wait_ms_median"]).c_str());
      line(buffer);
    }
    if (!stragglers["unscored_stages"].empty())
      line("stragglers: stages with fewer than 3 ranks are not scored (" +
           std::to_string(stragglers["unscored_stages"].size()) + " stages)");
  }
  if (!f["bubble"].empty()) {
    line("");
    line("pipeline bubble per stage (share of forward-backward not computing; 1F1B: (P-1)/(M+P-1))");
    for (const auto& b : f["bubble"]) {
      std::snprintf(buffer, sizeof buffer, "  stage %d: %s measured, %s theoretical (%s micro-batches)",
                    b["stage"].get<int>(),
                    b["measured"].is_number() ? percent(b["measured"].get<double>()).c_str() : "not",
                    b["theoretical"].is_number() ? percent(b["theoretical"].get<double>()).c_str() : "-",
                    b["microbatches"].is_number() ? std::to_string(b["microbatches"].get<int>()).c_str() : "?");
      line(buffer);
    }
    if (!f["bubble"].empty() && f["bubble"][0].contains("not_measured"))
      line("  bubble not measured: " + f["bubble"][0]["not_measured"].get<std::string>());
  }
  if (f["first_iteration"].is_object()) {
    const auto& first = f["first_iteration"];
    std::snprintf(buffer, sizeof buffer, "first iteration (%lld): %s ms, %s ms more than the median of the others",
                  first["iteration"].get<long long>(), format_ms(first["step_ms"]).c_str(),
                  format_ms(first["overhead_ms"]).c_str());
    line("");
    line(buffer);
  }
  if (!f["first_iteration"].is_object() && (!f["checkpoints"].empty() || !f["evaluations"].empty())) line("");
  for (const auto& c : f["checkpoints"]) {
    std::snprintf(buffer, sizeof buffer,
                  "checkpoint at iteration %lld: save %s ms (slowest of %d ranks), async write %s ms",
                  c["iteration"].get<long long>(), format_ms(c["save_ms_max"]).c_str(), c["ranks"].get<int>(),
                  format_ms(c["async_write_ms_max"]).c_str());
    line(buffer);
  }
  for (const auto& c : f["span_group_changes"]) {
    std::string line_text = "span groups " + std::string(c["restored"].get<bool>() ? "restored" : "changed") +
                            " from iteration " + c["iteration"].dump() + " on " + c["ranks"].dump() + " ranks";
    if (c["for_iterations"].get<std::int64_t>() > 0) line_text += " for " + c["for_iterations"].dump() + " iterations";
    line(line_text + ": " + c["span_groups"].get<std::string>());
  }
  for (const auto& e : f["evaluations"]) {
    std::snprintf(buffer, sizeof buffer, "evaluation after iteration %lld: %s ms (slowest of %d ranks)",
                  e["after_iteration"].get<long long>(), format_ms(e["max_ms"]).c_str(), e["ranks"].get<int>());
    line(buffer);
  }
  for (const auto& [name, series] : f["training_metrics"].items())
    line(name + " (rank " + std::to_string(series["rank"].get<int>()) +
         "): " + short_series(series["values"].get<std::vector<double>>()));
}

}  // namespace

namespace {

// The run, and what was read.
void render_header(const nlohmann::json& f, const std::function<void(const std::string&)>& line) {
  char buffer[512];
  const auto& run = f["run"];
  std::string ids;
  for (const auto& id : run["run_ids"]) ids += (ids.empty() ? "" : ", ") + id.get<std::string>();
  std::string services;
  for (const auto& s : run["services"]) services += (services.empty() ? "" : ", ") + s.get<std::string>();
  std::snprintf(buffer, sizeof buffer, "run %s  service %s  %d ranks seen of %d (pipeline %d x data %d)",
                ids.empty() ? "?" : ids.c_str(), services.empty() ? "?" : services.c_str(),
                static_cast<int>(run["ranks"].size()), run["world_size"].get<int>(),
                run["pipeline_parallel_size"].get<int>(), run["data_parallel_size"].get<int>());
  line(buffer);
  const auto& read = f["read"];
  std::snprintf(buffer, sizeof buffer, "read %llu files, %llu spans, %.1f MB", read["files"].get<unsigned long long>(),
                read["spans"].get<unsigned long long>(), read["bytes"].get<double>() / 1e6);
  line(buffer);
  if (const auto others = read["spans_of_other_names"].get<unsigned long long>(); others > 0) {
    std::snprintf(buffer, sizeof buffer, "%llu spans of names past the first %zu are counted as '%s'", others,
                  kMaxSpanNames, std::string(kOtherSpanNames).c_str());
    line(buffer);
  }
}

// The steps in one line: how many, their median, the slowest.
void render_step_summary(const nlohmann::json& steps, const std::function<void(const std::string&)>& line) {
  std::vector<double> medians;
  const nlohmann::json* slowest = nullptr;
  for (const auto& s : steps) {
    medians.push_back(s["median_ms"].get<double>());
    if (slowest == nullptr || s["max_ms"].get<double>() > (*slowest)["max_ms"].get<double>()) slowest = &s;
  }
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "steps: %zu iterations (%lld-%lld), step time %s ms (median over iterations of the median over "
                "ranks); slowest: iteration %lld, %s ms on rank %d",
                steps.size(), steps.front()["iteration"].get<long long>(), steps.back()["iteration"].get<long long>(),
                format_ms(median_of(medians)).c_str(), (*slowest)["iteration"].get<long long>(),
                format_ms((*slowest)["max_ms"]).c_str(), (*slowest)["slowest_rank"].get<int>());
  line(buffer);
}

void render_loss(const nlohmann::json& loss, const std::function<void(const std::string&)>& line) {
  char buffer[64];
  std::string series;
  const std::size_t n = loss.size(), shown = std::min<std::size_t>(n, 12);
  for (std::size_t i = 0; i < shown; ++i) {
    const std::size_t at = shown == 1 ? 0 : i * (n - 1) / (shown - 1);
    std::snprintf(buffer, sizeof buffer, "%s%lld:%.3f", series.empty() ? "" : " ",
                  loss[at]["iteration"].get<long long>(), number_or_nan(loss[at]["loss"]));
    series += buffer;
  }
  line("training loss by iteration (" + std::to_string(n) + " iterations): " + series);
}

void render_lost(const nlohmann::json& f, const std::function<void(const std::string&)>& line) {
  char buffer[512];
  const auto& lost = f["lost"];
  std::snprintf(buffer, sizeof buffer, "lost: %.0f spans dropped, %.0f exported (lens's own counters)",
                lost["spans_dropped"].get<double>(), lost["spans_exported"].get<double>());
  line(buffer);
  if (lost["spans_truncated"].get<std::uint64_t>() > 0)
    line("cut short: " + lost["spans_truncated"].dump() +
         " spans were still open at shutdown (nemo.span.truncated; their steps are left out of the step figures)");
  for (const auto& p : f["read"]["problems"]) {
    std::snprintf(buffer, sizeof buffer, "problem: %s:%llu: %s", p["file"].get<std::string>().c_str(),
                  p["line"].get<unsigned long long>(), p["what"].get<std::string>().c_str());
    line(buffer);
  }
}

void render_span_table(const nlohmann::json& spans, const std::function<void(const std::string&)>& line) {
  char buffer[512];
  line("spans, all ranks (ms)");
  std::snprintf(buffer, sizeof buffer, "  %-46s %9s %10s %10s %10s %10s", "name", "count", "p50", "p90", "p99", "max");
  line(buffer);
  for (const auto& s : spans) {
    std::snprintf(buffer, sizeof buffer, "  %-46s %9llu %10s %10s %10s %10s", s["name"].get<std::string>().c_str(),
                  s["count"].get<unsigned long long>(), format_ms(s["p50_ms"]).c_str(), format_ms(s["p90_ms"]).c_str(),
                  format_ms(s["p99_ms"]).c_str(), format_ms(s["max_ms"]).c_str());
    line(buffer);
  }
}

void render_step_table(const nlohmann::json& steps, const std::function<void(const std::string&)>& line) {
  char buffer[512];
  line("step time per iteration, over ranks (ms)");
  std::snprintf(buffer, sizeof buffer, "  %9s %6s %10s %10s %13s", "iteration", "ranks", "median", "max",
                "slowest rank");
  line(buffer);
  for (const auto& s : steps) {
    std::snprintf(buffer, sizeof buffer, "  %9lld %6d %10s %10s %13d", s["iteration"].get<long long>(),
                  s["ranks"].get<int>(), format_ms(s["median_ms"]).c_str(), format_ms(s["max_ms"]).c_str(),
                  s["slowest_rank"].get<int>());
    line(buffer);
  }
}

}  // namespace

// The summary first (what a person asks first), then the tables: the per-iteration one only when short or asked
// for (a long run's 1,000 rows would bury the summary).
std::string render_text(const nlohmann::json& f, const TextOptions& options) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  render_header(f, line);
  const auto& steps = f["steps"];
  if (!steps.empty()) {
    line("");
    render_step_summary(steps, line);
  }
  if (!f["loss"].empty()) render_loss(f["loss"], line);
  render_analysis(f, line);
  line("");
  render_lost(f, line);
  line("");
  render_span_table(f["spans"], line);
  if (!steps.empty()) {
    line("");
    if (options.every_step || steps.size() <= kStepRowsShown)
      render_step_table(steps, line);
    else
      line("step time per iteration: " + std::to_string(steps.size()) + " rows, shown with --steps A-B (or all " +
           "in --json)");
  }
  return out;
}

}  // namespace lens_tools
