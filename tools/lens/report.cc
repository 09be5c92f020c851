#include "report.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "watch/straggler_rule.h"

namespace lens_tools {
namespace {

constexpr double kBucketBase = 1.01;
constexpr std::int64_t kMaxIterations = std::int64_t{1} << 32;  // beyond: not a real iteration number

bool is_step_span(std::string_view name) {
  return name == "megatron.train_step" || name == "megatron.train.iteration";  // SPAN_NAMES documented, megatron
}

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

namespace {
int bucket_of(std::uint64_t ns) {
  return ns == 0 ? -1 : static_cast<int>(std::floor(std::log(ns) / std::log(kBucketBase)));
}
}  // namespace

void Durations::add(std::uint64_t ns) {
  ++count_;
  total_ += ns;
  max_ = std::max(max_, ns);
  if (buckets_.empty() && exact_.size() < kExactLimit) {
    exact_.push_back(ns);
    sorted_ = false;
    return;
  }
  to_buckets();  // past the limit: the exact values move into the histogram once
  ++buckets_[bucket_of(ns)];
}

void Durations::to_buckets() {
  for (std::uint64_t v : exact_) ++buckets_[bucket_of(v)];
  exact_.clear();
  exact_.shrink_to_fit();
}

void Durations::merge(Durations&& other) {
  if (other.count_ == 0) return;
  count_ += other.count_;
  total_ += other.total_;
  max_ = std::max(max_, other.max_);
  // Exact while all of them fit, as add() keeps them; else all in the histogram, where add() would have put them.
  if (buckets_.empty() && other.buckets_.empty() && exact_.size() + other.exact_.size() <= kExactLimit) {
    exact_.insert(exact_.end(), other.exact_.begin(), other.exact_.end());
    sorted_ = false;
    return;
  }
  to_buckets();
  other.to_buckets();
  for (const auto& [bucket, n] : other.buckets_) buckets_[bucket] += n;
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

enum EventKind { kSave, kWorkerWrite, kEvaluate };

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

}  // namespace

void Report::identity(const Origin& o) {
  if (!o.run_id.empty()) run_ids_.insert(o.run_id);
  if (!o.service.empty()) services_.insert(o.service);
  if (o.rank >= 0) ranks_.insert(o.rank);
  if (o.rank >= 0 && !o.host.empty()) host_of_rank_.try_emplace(o.rank, o.host);
  world_size_ = std::max(world_size_, o.world_size);
  pipeline_size_ = std::max(pipeline_size_, o.pipeline_size);
  data_parallel_size_ = std::max(data_parallel_size_, o.data_parallel_size);
  tensor_size_ = std::max(tensor_size_, o.tensor_size);
}

Report::Process& Report::process_of(const SpanRow& s) {
  if (s.origin == last_origin_) return *last_process_;
  // Who wrote it, taken once a batch (what identity() keeps does not change with the spans of one origin).
  const Origin& o = *s.origin;
  identity(o);
  std::string key = process_key(o);
  Process& p = processes_[key];
  if (p.key.empty()) p.rank = o.rank, p.key = std::move(key);
  last_origin_ = s.origin;
  last_process_ = &p;
  return p;
}

Report::NameClass Report::classify(std::string_view name) {
  NameClass c;
  if (const std::string_view host = host_of_device_span(name); !host.empty()) {
    c.device = true;
    c.durations = &durations_of(device_durations_, host, c.other_name);
    c.part = step_part(host);
    return c;
  }
  c.durations = &durations_of(durations_, name, c.other_name);
  c.megatron = name.starts_with("megatron.");
  c.step = is_step_span(name);
  c.part = step_part(name);
  c.event = event_kind(name);
  return c;
}

const Report::NameClass& Report::name_class(std::string_view name) {
  if (auto it = name_classes_.find(name); it != name_classes_.end()) return it->second;
  if (name_classes_.size() >= kMaxNameClasses) return unkept_class_ = classify(name);
  // A durations entry never moves (a node of a std::map) and a name past kMaxSpanNames stays past it: a class
  // stays true for the rest of the read.
  return name_classes_.emplace(std::string(name), classify(name)).first->second;
}

void Report::span(const SpanRow& s) {
  clock_links_.add(s);
  Process& p = process_of(s);
  const NameClass& c = name_class(s.name);
  if (c.other_name) ++spans_of_other_names_;
  if (c.device) {
    device_span(p, c, s);
    return;
  }
  if (s.truncated) ++truncated_;
  note_time(p, c, s);
  if (s.group_change && s.iteration >= 0) {
    auto& [change, ranks] = group_changes_[s.iteration];
    change = *s.group_change;
    ranks.insert(p.rank);
  }
  if (c.step && s.iteration >= 0 && s.iteration < kMaxIterations) {
    if (!s.truncated) step(p, s);  // a step cut short by shutdown is not a step's time
  } else if (c.part != kNoPart) {
    parts_seen_[static_cast<std::size_t>(c.part)] = true;
    const Pending item{s.start_ns, s.end_ns, c.part, s.num_microbatches, false, s.backward_pass};
    if (!place(p, item)) p.pending.emplace(item.start_ns, item);
  } else if (c.event >= 0) {
    events_.push_back({c.event, p.rank, s.start_ns, s.end_ns, s.iteration, &p});
  }
  c.durations->add(s.duration_ns());
}

Durations& Report::durations_of(std::map<std::string, Durations, std::less<>>& by_name, std::string_view name,
                                bool& other_name) {
  auto it = by_name.find(name);
  other_name = false;
  if (it == by_name.end()) {
    // Memory follows the names, which a file can make endless (200 k names took 362 MB): past kMaxSpanNames,
    // spans of new names are counted under one.
    other_name = by_name.size() >= kMaxSpanNames;
    it = by_name.try_emplace(other_name ? std::string(kOtherSpanNames) : std::string(name), by_name.size()).first;
  }
  return it->second;
}

// A device span: beside its host span's name, and in the phase of its host span, never in a phase of its own.
void Report::device_span(Process& p, const NameClass& c, const SpanRow& s) {
  c.durations->add(s.duration_ns());
  if (c.part == kNoPart || c.part == kForwardBackward) return;
  device_parts_seen_[static_cast<std::size_t>(c.part)] = true;
  const Pending item{s.start_ns, s.end_ns, c.part, -1, true};
  if (!place(p, item)) p.pending.emplace(item.start_ns, item);
}

void Report::note_time(Process& p, const NameClass& c, const SpanRow& s) {
  if (!c.megatron || s.end_ns < s.start_ns) return;
  Timeline& t = p.timeline;
  t.first_ns = std::min(t.first_ns, s.start_ns);
  t.last_ns = std::max(t.last_ns, s.end_ns);
  if (c.event == kSave)
    t.save_ns += s.end_ns - s.start_ns;
  else if (c.event == kEvaluate)
    t.evaluate_ns += s.end_ns - s.start_ns;
}

void Report::step(Process& p, const SpanRow& s) {
  if (s.loss) loss_[s.iteration] = *s.loss;
  first_iteration_ = std::min(first_iteration_, s.iteration);
  const StepWindow window{s.start_ns, s.end_ns, s.iteration};
  make_room_for_one_more(p.steps);  // a process holds a window an iteration
  auto where = std::upper_bound(p.steps.begin(), p.steps.end(), window.start_ns,
                                [](std::uint64_t t, const StepWindow& w) { return t < w.start_ns; });
  p.steps.insert(where, window);  // nearly always at the end
  if (steps_.contains(s.iteration))
    records_.at(s.iteration, p.rank).step_ns = std::max<std::uint64_t>(s.duration_ns(), 1);
  // Claim what waited for this step; what started between the first step read and the step two back belongs to no
  // step (an evaluation's micro-batches) and is let go, so that pending stays small. What started before the first
  // step read is kept: a thread that reads a process's later files (Report::read) has its earlier steps in another
  // report, which claims those spans when the two merge.
  for (auto it = p.pending.lower_bound(window.start_ns); it != p.pending.end() && it->first <= window.end_ns;)
    it = place(p, it->second) ? p.pending.erase(it) : std::next(it);
  if (p.steps.size() >= 3)  // steps are in start order: the first starts no later than the one two back
    p.pending.erase(p.pending.lower_bound(p.steps.front().start_ns),
                    p.pending.lower_bound(p.steps[p.steps.size() - 3].start_ns));
}

// Adds `item` to the record of the step of `p` that contains it; false when no known step does.
bool Report::place(Process& p, const Pending& item) {
  auto after = std::upper_bound(p.steps.begin(), p.steps.end(), item.start_ns,
                                [](std::uint64_t t, const StepWindow& w) { return t < w.start_ns; });
  if (after == p.steps.begin()) return false;
  const StepWindow& w = *std::prev(after);
  if (item.device ? item.start_ns > w.end_ns : item.end_ns > w.end_ns) return false;
  if (!steps_.contains(w.iteration)) return true;
  const std::uint64_t ns = item.end_ns > item.start_ns ? item.end_ns - item.start_ns : 0;
  if (item.device) {  // the step's record was made with its window (step())
    device_records_.at(w.iteration, p.rank).phase_ns[static_cast<std::size_t>(item.kind)] += ns;
    return true;
  }
  StepRecord& r = records_.at(w.iteration, p.rank);
  if (item.kind == kForwardBackward) {
    r.forward_backward_ns += ns;
    r.forward_backward_start_ns = item.start_ns;
    r.forward_backward_end_ns = item.end_ns;
    r.microbatches = static_cast<std::int32_t>(
        std::clamp<std::int64_t>(std::max<std::int64_t>(r.microbatches, item.microbatches), -1, INT32_MAX));
  } else {
    r.phase_ns[static_cast<std::size_t>(item.kind)] += ns;
    // Out of the pass it ran in, modulo 2^64: that micro-batch span may be placed after it, adding its whole time.
    if (item.kind == kTensorParallelWait) r.phase_ns[item.backward_pass ? kBackward : kForward] -= ns;
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
    LastValue& last = counters_[{process_key(o), std::string(p.name), std::string(p.reason)}];
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

int Report::tensor_rank_of(int rank) const { return rank % std::max(1, tensor_size_); }

int Report::replica_of(int rank) const { return rank / std::max(1, tensor_size_) % std::max(1, data_parallel_size_); }

std::map<std::string, std::vector<StepWindow>> Report::windows(StepRange range) const {
  std::map<std::string, std::vector<StepWindow>> out;
  for (const auto& [key, p] : processes_)
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
  if (part == kTensorParallelWait && tensor_size_ <= 1) return {};
  struct Need {
    const char* spans;
    const char* group;
  };
  static constexpr std::array<Need, kPhaseCount + 1> kNeeds = {{
      {"megatron.microbatch.forward/backward", "microbatch"},
      {"megatron.microbatch.forward/backward", "microbatch"},
      {"megatron.p2p.recv_*", "communication"},
      {"megatron.grad_sync.finish", "communication"},
      {"megatron.tp.all_reduce", "communication"},
      {"megatron.optimizer_step", "optimizer"},
      {"megatron.forward_backward", "forward_backward"},
  }};
  const Need& need = kNeeds[static_cast<std::size_t>(part)];
  return std::string("no ") + need.spans + " spans: needs span group '" + need.group + "' (on under 'all')";
}

PhaseFigures Report::phase_figures() const {
  struct RankSums {
    std::array<double, kPhaseCount> phase{}, device{};
    double step = 0, n = 0;
  };
  std::map<int, RankSums> sums;
  const DevicePhaseRecord no_device_spans;
  records_.for_each_iteration([&](std::int64_t iteration, const auto& by_rank) {
    for (const auto& r : by_rank) {
      if (r->step_ns == 0) continue;
      RankSums& t = sums[r.rank];
      ++t.n;
      t.step += ms(r->step_ns);
      const DevicePhaseRecord* device = device_records_.empty() ? nullptr : device_records_.find(iteration, r.rank);
      if (device == nullptr) device = &no_device_spans;
      for (int k = 0; k < kPhaseCount; ++k) {
        t.phase[k] += ms(r->phase_ns[k]);
        t.device[k] += ms(device->phase_ns[k]);
      }
    }
  });
  PhaseFigures out;
  for (int k = 0; k < kPhaseCount; ++k) out.not_measured[k] = not_measured(k);
  // A phase with no figure is none, never 0; `other` is then the step less what was measured.
  auto row_of = [&](const RankSums& t) {
    PhaseRow row{.steps = t.n, .step_ms = t.n > 0 ? t.step / t.n : 0.0};
    double accounted = 0;
    for (int k = 0; k < kPhaseCount; ++k) {
      if (out.not_measured[k].empty()) row.phase_ms[k] = t.n > 0 ? t.phase[k] / t.n : 0.0;
      if (device_parts_seen_[k]) row.device_phase_ms[k] = t.n > 0 ? t.device[k] / t.n : 0.0;
      if (row.phase_ms[k] && row.device_phase_ms[k])
        row.launch_overhead_ms[k] = *row.phase_ms[k] - *row.device_phase_ms[k];
      accounted += t.phase[k];
    }
    row.other_ms = t.n > 0 ? std::max(0.0, t.step - accounted) / t.n : 0.0;
    return row;
  };
  RankSums all;
  for (const auto& [rank, t] : sums) {
    out.per_rank[rank] = row_of(t);
    for (int k = 0; k < kPhaseCount; ++k) all.phase[k] += t.phase[k], all.device[k] += t.device[k];
    all.step += t.step;
    all.n += t.n;
  }
  out.mean_per_step = row_of(all);
  return out;
}

// Windows of StragglerRule::kWindowSteps iterations, aligned as the job's own (iterations 1-20, 21-40, ...): in
// each, every rank's median compute and wait against its stage peers' by the job's rule (src/watch/straggler_rule.h). A
// rank is named when flagged in more than kShare of its scored windows' steps: in exactly half, the flag is no more
// persistent than its absence (one window of two that the machine starved).
StragglerFigures Report::straggler_figures() const {
  StragglerFigures out;
  // Compute is the micro-batches' forward and backward: without their spans every rank would score 0.
  out.not_scored = not_measured(kForward);
  if (out.not_scored.empty()) out.not_scored = not_measured(kBackward);
  if (!out.not_scored.empty() || records_.empty()) return out;
  struct Steps {
    std::vector<double> compute, wait;
  };
  std::map<std::int64_t, std::map<int, Steps>> windows;     // window index -> rank -> its steps
  std::map<std::pair<int, int>, std::set<int>> peer_ranks;  // (stage, tensor-parallel rank) -> its ranks
  records_.for_each_iteration([&](std::int64_t iteration, const auto& by_rank) {
    for (const auto& r : by_rank) {
      peer_ranks[{stage_of(r.rank), tensor_rank_of(r.rank)}].insert(r.rank);
      if (r->step_ns == 0) continue;
      Steps& steps = windows[(iteration - 1) / StragglerRule::kWindowSteps][r.rank];
      steps.compute.push_back(static_cast<double>(r->phase_ns[kForward] + r->phase_ns[kBackward]));
      steps.wait.push_back(static_cast<double>(r->phase_ns[kPipelineReceiveWait] + r->phase_ns[kGradSyncWait] +
                                               r->phase_ns[kTensorParallelWait]));
    }
  });
  for (const auto& [peers, ranks] : peer_ranks)
    if (ranks.size() < 2 && (out.unscored_stages.empty() || out.unscored_stages.back() != peers.first))
      out.unscored_stages.push_back(peers.first);
  struct Tally {
    int scored = 0, flagged = 0;
    std::vector<double> score, compute, wait, peer_compute, peer_wait;
  };
  std::map<int, Tally> tally;
  for (auto& [index, by_rank] : windows) {
    std::vector<lens::straggler::RankWindow> ranks;
    for (auto& [rank, steps] : by_rank)
      ranks.push_back({.rank = rank,
                       .stage = stage_of(rank),
                       .tensor_rank = tensor_rank_of(rank),
                       .steps = static_cast<std::int64_t>(steps.compute.size()),
                       .compute_ns = lens::straggler::median_of(steps.compute),
                       .wait_ns = lens::straggler::median_of(steps.wait)});
    for (const lens::straggler::Score& s : lens::straggler::score_window(ranks)) {
      if (!s.scored) continue;
      Tally& t = tally[s.rank];
      const int steps = static_cast<int>(by_rank[s.rank].compute.size());
      t.scored += steps;
      if (s.flagged) t.flagged += steps;
      t.score.push_back(s.score);
      t.compute.push_back(s.compute_ns / 1e6);
      t.wait.push_back(s.wait_ns / 1e6);
      t.peer_compute.push_back(s.peer_compute_ns / 1e6);
      t.peer_wait.push_back(s.peer_wait_ns / 1e6);
    }
  }
  for (auto& [rank, t] : tally) {
    const StragglerRow row{.rank = rank,
                           .stage = stage_of(rank),
                           .steps_scored = t.scored,
                           .steps_flagged = t.flagged,
                           .share = t.scored > 0 ? static_cast<double>(t.flagged) / t.scored : 0,
                           .score = figure_of(lens::straggler::median_of(t.score)),
                           .compute_ms_median = figure_of(lens::straggler::median_of(t.compute)),
                           .stage_compute_ms_median = figure_of(lens::straggler::median_of(t.peer_compute)),
                           .wait_ms_median = figure_of(lens::straggler::median_of(t.wait)),
                           .stage_wait_ms_median = figure_of(lens::straggler::median_of(t.peer_wait))};
    out.ranks.push_back(row);
    if (t.scored > 0 && row.share > StragglerRule::kShare) out.named.push_back(row);
  }
  return out;
}

// One rank's processes in time order: each trained from its first span to its last; the first step of each ends
// its startup; an iteration run by a later process too was redone in the earlier one; gaps are restarts.
GoodputFigures Report::goodput_figures() const {
  GoodputFigures out;
  // The steps a process trained: its step windows that end after they start (what note_time() times).
  const auto trained = [](const StepWindow& w) { return w.end_ns >= w.start_ns; };
  std::map<int, std::vector<const Process*>> by_rank;
  for (const auto& [key, p] : processes_)
    if (std::any_of(p.steps.begin(), p.steps.end(), trained)) by_rank[p.rank].push_back(&p);
  if (by_rank.empty()) {
    out.not_measured = "no step spans (megatron.train_step: span group `step` off)";
    return out;
  }
  auto& [rank, processes] = *by_rank.begin();
  std::sort(processes.begin(), processes.end(),
            [](auto* a, auto* b) { return a->timeline.first_ns < b->timeline.first_ns; });
  out.rank = rank;
  out.attempts = static_cast<int>(processes.size());
  std::map<std::int64_t, std::pair<std::uint64_t, std::uint64_t>> last_run;  // iteration -> (end, duration)
  std::uint64_t all_steps_ns = 0, startup_ns = 0, save_ns = 0, evaluate_ns = 0, restarts_ns = 0;
  std::uint64_t previous_last = 0;
  std::size_t step_count = 0;
  for (const Process* p : processes) {
    const Timeline* t = &p->timeline;
    std::uint64_t first_step = UINT64_MAX;
    for (const StepWindow& st : p->steps) {
      if (!trained(st)) continue;
      ++step_count;
      const std::uint64_t ns = st.end_ns - st.start_ns;
      all_steps_ns += ns;
      first_step = std::min(first_step, st.start_ns);
      auto& [end, duration] = last_run[st.iteration];
      if (st.end_ns >= end) end = st.end_ns, duration = ns;
    }
    startup_ns += first_step > t->first_ns ? first_step - t->first_ns : 0;
    save_ns += t->save_ns;
    evaluate_ns += t->evaluate_ns;
    if (previous_last != 0 && t->first_ns > previous_last) restarts_ns += t->first_ns - previous_last;
    previous_last = std::max(previous_last, t->last_ns);
  }
  std::uint64_t goodput_ns = 0;
  for (const auto& [iteration, run] : last_run) goodput_ns += run.second;
  out.redone_iterations = static_cast<std::int64_t>(step_count - last_run.size());
  const std::uint64_t wall_ns = processes.back()->timeline.last_ns - processes.front()->timeline.first_ns;
  const std::uint64_t redone_ns = all_steps_ns - goodput_ns;
  auto s = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e9; };
  out.wall_s = s(wall_ns);
  out.goodput_s = s(goodput_ns);
  out.share = wall_ns > 0 ? static_cast<double>(goodput_ns) / static_cast<double>(wall_ns) : 0;
  out.startup_s = s(startup_ns);
  out.checkpoint_s = s(save_ns);
  out.evaluation_s = s(evaluate_ns);
  out.restarts_s = s(restarts_ns);
  out.redone_s = s(redone_ns);
  const std::uint64_t accounted = all_steps_ns + startup_ns + save_ns + evaluate_ns + restarts_ns;
  out.other_s = s(wall_ns > accounted ? wall_ns - accounted : 0);
  return out;
}

// Per stage: the share of a pipeline's forward-backward time in which the stage is not computing micro-batches
// (median over the stage's ranks and steps), beside 1F1B's (P - 1) / (M + P - 1). A pipeline's time is from the first
// stage's forward-backward start to the last one's end in the same iteration and replica: a later stage's own span
// begins before its first micro-batch arrives but ends before the first stage's last backward, so the span alone
// would hide part of its bubble. The ranks' clocks are compared: skew between hosts adds to it.
std::vector<BubbleRow> Report::bubble_figures(const ClockFigures& clocks) const {
  // A replica's stages may run on several hosts: their times on the reference host's clock.
  std::map<int, std::int64_t> offset_of_rank;
  for (const auto& [rank, host] : host_of_rank_) offset_of_rank[rank] = clocks.offset_ns(host);
  std::map<int, std::vector<double>> measured, microbatches;
  records_.for_each_iteration([&](std::int64_t, const auto& by_rank) {
    std::map<int, std::pair<std::int64_t, std::int64_t>> window;  // replica -> [first start, last end]
    for (const auto& r : by_rank) {
      if (r->forward_backward_ns == 0) continue;
      const std::int64_t offset = offset_of_rank[r.rank];
      const std::int64_t start = static_cast<std::int64_t>(r->forward_backward_start_ns) + offset;
      const std::int64_t end = static_cast<std::int64_t>(r->forward_backward_end_ns) + offset;
      auto [w, fresh] = window.try_emplace(replica_of(r.rank), start, end);
      w->second.first = std::min(w->second.first, start);
      w->second.second = std::max(w->second.second, end);
    }
    for (const auto& r : by_rank) {
      if (r->forward_backward_ns == 0) continue;
      const auto& [first, last] = window.at(replica_of(r.rank));
      const double compute = static_cast<double>(r->phase_ns[kForward] + r->phase_ns[kBackward]);
      const double span = static_cast<double>(std::max<std::int64_t>(last - first, 1));
      measured[stage_of(r.rank)].push_back(std::clamp(1.0 - compute / span, 0.0, 1.0));
      if (r->microbatches > 0) microbatches[stage_of(r.rank)].push_back(static_cast<double>(r->microbatches));
    }
  });
  std::vector<BubbleRow> out;
  const int p = std::max(1, pipeline_size_);
  // Not computing is the forward-backward less the micro-batches' forward and backward: without their spans it
  // would be all of it.
  std::string unmeasured = not_measured(kForward);
  if (unmeasured.empty()) unmeasured = not_measured(kBackward);
  for (const auto& [stage, values] : measured) {
    const double m = median_of(microbatches[stage]);
    out.push_back({.stage = stage,
                   .steps = values.size(),
                   .microbatches = figure_of(m),
                   .measured = unmeasured.empty() ? Figure(median_of(values)) : Figure(),
                   .theoretical = std::isnan(m) ? Figure() : Figure((p - 1) / (m + p - 1)),
                   .not_measured = unmeasured});
  }
  return out;
}

// Checkpoints by iteration: the blocking save (slowest rank) and the worker's write that followed it.
std::vector<CheckpointFigures> Report::checkpoint_figures() const {
  std::map<std::int64_t, CheckpointFigures> saves;
  std::map<std::int64_t, std::set<int>> save_ranks;
  std::map<int, std::vector<const Event*>> saves_by_rank;
  for (const Event& e : events_)
    if (e.kind == kSave && e.iteration >= 0) {
      CheckpointFigures& c = saves[e.iteration];
      c.iteration = e.iteration;
      save_ranks[e.iteration].insert(e.rank);
      c.save_ms_max = std::max(c.save_ms_max, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
      saves_by_rank[e.rank].push_back(&e);
    }
  for (const Event& e : events_) {
    if (e.kind != kWorkerWrite) continue;
    const Event* latest = nullptr;  // the rank's last save that began before this write
    for (const Event* save : saves_by_rank[e.rank])
      if (save->start_ns <= e.start_ns && (latest == nullptr || save->start_ns > latest->start_ns)) latest = save;
    if (latest != nullptr) {
      CheckpointFigures& c = saves[latest->iteration];
      c.async_write_ms_max = std::max(c.async_write_ms_max, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
    }
  }
  std::vector<CheckpointFigures> out;
  for (auto& [iteration, c] : saves) {
    c.ranks = save_ranks[iteration].size();
    out.push_back(c);
  }
  return out;
}

// Evaluations, after the iteration the rank finished last before each began.
std::vector<EvaluationFigures> Report::evaluation_figures() const {
  std::map<std::int64_t, EvaluationFigures> evaluations;
  for (const Event& e : events_) {
    if (e.kind != kEvaluate) continue;
    std::int64_t after = 0;
    for (const StepWindow& w : e.process->steps)
      if (w.end_ns <= e.start_ns) after = std::max(after, w.iteration);
    EvaluationFigures& figures = evaluations[after];
    figures.after_iteration = after;
    ++figures.ranks;
    figures.max_ms = std::max(figures.max_ms, ms(e.end_ns - std::min(e.start_ns, e.end_ns)));
  }
  std::vector<EvaluationFigures> out;
  out.reserve(evaluations.size());
  for (const auto& [after, figures] : evaluations) out.push_back(figures);
  return out;
}

std::vector<SpanFigures> Report::span_figures() {
  std::vector<SpanFigures> out;
  for (auto& [name, d] : durations_) {
    SpanFigures& f = out.emplace_back();
    f.name = name;
    f.count = d.count();
    f.p50_ms = ms(d.percentile(0.50));
    f.p90_ms = ms(d.percentile(0.90));
    f.p99_ms = ms(d.percentile(0.99));
    f.max_ms = ms(d.max());
    f.mean_ms = d.mean() / 1e6;
  }
  for (auto& [name, d] : device_durations_) {
    auto host = std::lower_bound(out.begin(), out.end(), name,
                                 [](const SpanFigures& f, const std::string& n) { return f.name < n; });
    if (host == out.end() || host->name != name) {  // its host spans were not read: a row of device time only
      host = out.insert(host, SpanFigures{});
      host->name = name;
    }
    host->device = DeviceTimeFigures{.count = d.count(),
                                     .p50_ms = ms(d.percentile(0.50)),
                                     .p90_ms = ms(d.percentile(0.90)),
                                     .p99_ms = ms(d.percentile(0.99)),
                                     .max_ms = ms(d.max()),
                                     .mean_ms = d.mean() / 1e6};
    if (host->count > 0) host->launch_overhead_ms = host->mean_ms - host->device->mean_ms;
  }
  return out;
}

// The step table; with `by_rank`, also every rank's step time in each of its rows.
std::vector<StepFigures> Report::step_figures(std::map<int, std::vector<Figure>>* by_rank) const {
  const std::vector<int> ranks_with_steps = records_.ranks();  // in order
  std::vector<StepFigures> out;
  std::vector<double> times;
  records_.for_each_iteration([&](std::int64_t iteration, const auto& records) {
    times.clear();
    int slowest = -1;
    std::uint64_t longest = 0;
    for (const auto& r : records) {
      if (r->step_ns == 0) continue;
      times.push_back(ms(r->step_ns));
      if (slowest < 0 || r->step_ns > longest) slowest = r.rank, longest = r->step_ns;
    }
    if (times.empty()) return;
    out.push_back({.iteration = iteration,
                   .ranks = times.size(),
                   .median_ms = median_of(times),
                   .max_ms = ms(longest),
                   .slowest_rank = slowest});
    if (by_rank == nullptr) return;
    auto next = records.begin();  // both in rank order
    for (int rank : ranks_with_steps) {
      while (next != records.end() && next->rank < rank) ++next;
      const bool stepped = next != records.end() && next->rank == rank && (*next)->step_ns != 0;
      const std::uint64_t ns = stepped ? (*next)->phase_ns[kForward] + (*next)->phase_ns[kBackward] : 0;
      (*by_rank)[rank].push_back(ns == 0 ? Figure() : Figure(ms(ns)));
    }
  });
  return out;
}

std::map<std::string, TrainingSeries> Report::training_figures() {
  std::map<std::string, TrainingSeries> out;
  for (auto& [name, ranks] : training_) {  // the series of the lowest rank that records it
    auto& points = ranks.begin()->second;
    std::sort(points.begin(), points.end());
    TrainingSeries& series = out[name];
    series.rank = ranks.begin()->first;
    for (const auto& [time, value] : points) series.values.push_back(value);
  }
  return out;
}

std::vector<GroupChangeFigures> Report::group_change_figures() const {
  std::vector<GroupChangeFigures> out;
  for (const auto& [iteration, entry] : group_changes_)
    out.push_back({.iteration = iteration,
                   .span_groups = entry.first.span_groups,
                   .for_iterations = entry.first.iterations,
                   .restored = entry.first.restored,
                   .ranks = entry.second.size()});
  return out;
}

LostFigures Report::lost_figures() const {
  LostFigures out;
  out.spans_truncated = truncated_;
  for (const auto& [key, last] : counters_) {
    if (key.name == "lens.spans.exported")
      out.spans_exported += last.value;
    else
      out.dropped_by_reason[key.reason] += last.value;
  }
  for (const auto& [reason, n] : out.dropped_by_reason) out.spans_dropped += n;
  return out;
}

Figures Report::figures(const ReadStats& read, bool series) {
  settle();
  Figures f;
  f.run = {.run_ids = run_ids_,
           .services = services_,
           .ranks = ranks_,
           .world_size = world_size_,
           .tensor_parallel_size = tensor_size_,
           .pipeline_parallel_size = pipeline_size_,
           .data_parallel_size = data_parallel_size_};
  f.spans = span_figures();
  f.steps = step_figures(series ? &f.compute_ms_by_rank : nullptr);
  f.phases = phase_figures();
  f.stragglers = straggler_figures();
  f.goodput = goodput_figures();
  f.clocks = clock_links_.estimate();
  f.bubble = bubble_figures(f.clocks);
  // The first iteration against the others: only when the step table starts at the run's first step.
  if (f.steps.size() >= 2 && f.steps[0].iteration == first_iteration_) {
    std::vector<double> rest;
    for (std::size_t i = 1; i < f.steps.size(); ++i) rest.push_back(f.steps[i].median_ms);
    const double first = f.steps[0].median_ms, typical = median_of(rest);
    f.first_iteration = FirstIteration{.iteration = f.steps[0].iteration,
                                       .step_ms = first,
                                       .later_median_ms = typical,
                                       .overhead_ms = first - typical};
  }
  f.checkpoints = checkpoint_figures();
  f.evaluations = evaluation_figures();
  for (const auto& [iteration, value] : loss_) f.loss.push_back({.iteration = iteration, .loss = value});
  f.training_metrics = training_figures();
  f.span_group_changes = group_change_figures();
  f.lost = lost_figures();
  f.read = {.files = read.files,
            .lines = read.lines,
            .bytes = read.bytes,
            .spans = read.spans,
            .spans_of_other_names = spans_of_other_names_,
            .problems = read.problems};
  return f;
}

// ---- reading in parallel: a report per run of files, merged ----------------------------------------------------

namespace {

// Consecutive runs of `files`, at most `parts`, of about equal bytes; empty when one file holds more than 2/(parts+1)
// of the bytes (a Collector's one large file: its lines are better parsed in parallel than given to one thread).
std::vector<std::pair<std::size_t, std::size_t>> runs_of_files(const std::vector<std::string>& files,
                                                               std::size_t parts) {
  std::vector<std::uintmax_t> bytes;
  std::uintmax_t total = 0, largest = 0;
  for (const std::string& f : files) {
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(f, error);
    bytes.push_back(error ? 0 : size);
    total += bytes.back();
    largest = std::max(largest, bytes.back());
  }
  parts = std::min(parts, files.size());
  if (parts < 2 || largest * (parts + 1) > total * 2) return {};
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  std::uintmax_t so_far = 0;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    so_far += bytes[i];
    const std::size_t left = files.size() - i - 1, runs_left = parts - runs.size() - 1;
    // Close the run once it holds its share of the bytes, or when each run still to come needs one of the files left.
    if (runs_left > 0 && (so_far * parts >= total * (runs.size() + 1) || left == runs_left)) {
      runs.emplace_back(begin, i + 1);
      begin = i + 1;
    }
  }
  runs.emplace_back(begin, files.size());
  return runs;
}

// What one thread reads: a run of consecutive files, or a part of one large plain file (a Collector's), its lines
// that begin in [first_byte, end_byte).
struct Part {
  std::size_t first_file, end_file;
  std::uint64_t first_byte = 0, end_byte = UINT64_MAX;
};

// The parts of a read, at most `threads`, in the files' order; empty when one thread reads them all (or one large
// gzip file's lines are parsed in parallel: read_run).
std::vector<Part> parts_to_read(const std::vector<std::string>& files, std::size_t threads) {
  std::vector<Part> parts;
  for (const auto& [first, end] : runs_of_files(files, threads)) parts.push_back({first, end});
  if (parts.empty() && files.size() == 1) {
    const std::vector<std::uint64_t> cuts = line_starts_for_parts(files[0], threads);
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) parts.push_back({0, 1, cuts[i], cuts[i + 1]});
  }
  return parts;
}

// A part of a file after its first numbers its problems from its own first line, and counts the file again: said
// as of the file (the lines of the parts before it added, the file counted once).
void number_as_of_the_file(ReadStats& part, std::uint64_t lines_before) {
  for (ReadProblem& p : part.problems)
    if (p.line > 0) p.line += lines_before;
  part.files = 0;
}

}  // namespace

ReadStats Report::read(const std::vector<std::string>& files, const ReadOptions& options) {
  const std::vector<Part> parts = parts_to_read(files, reading_threads(options));
  if (parts.empty()) return read_run(files, *this, options);
  const std::size_t n = parts.size();
  std::vector<Report> later(n - 1, Report(steps_));  // runs 1..n-1; run 0 is read into this one
  std::vector<ReadStats> stats(n);
  std::vector<std::exception_ptr> errors(n);
  // Progress: the sum of every thread's bytes, said by one thread at a time.
  std::mutex progress_mutex;
  std::vector<std::uint64_t> done(n);
  const auto read_one = [&](std::size_t i) {
    try {
      ReadOptions own = options;
      own.threads = 1;
      if (options.progress)
        own.progress = [&, i](std::uint64_t bytes) {
          std::lock_guard lock(progress_mutex);
          done[i] = bytes;
          std::uint64_t all = 0;
          for (std::uint64_t d : done) all += d;
          options.progress(all);
        };
      own.first_byte = parts[i].first_byte;
      own.end_byte = parts[i].end_byte;
      const std::vector<std::string> run(files.begin() + static_cast<std::ptrdiff_t>(parts[i].first_file),
                                         files.begin() + static_cast<std::ptrdiff_t>(parts[i].end_file));
      stats[i] = read_run(run, i == 0 ? *this : later[i - 1], own);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  // Parts 1.. on threads of their own while the process lets them start; part 0, and each part whose thread did not
  // start, on this one.
  std::vector<std::thread> threads;
  std::size_t started = 1;
  while (started < n && try_start_thread(threads, [&read_one, i = started] { read_one(i); })) ++started;
  read_one(0);
  for (std::size_t i = started; i < n; ++i) read_one(i);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  // A later thread that met more than kMaxSpanNames names counted some under kOtherSpanNames that the one report may
  // list by name (an earlier file's names come first): a run of endless names (not lens's) is read again, by one.
  for (const Report& r : later)
    if (r.spans_of_other_names_ > 0) {
      *this = Report(steps_);
      return read_run(files, *this, options);
    }
  std::uint64_t lines_of_the_file = stats[0].lines;  // in the parts of one file read so far
  for (std::size_t i = 1; i < n; ++i) {
    merge(std::move(later[i - 1]));
    if (parts[i].first_byte > 0) number_as_of_the_file(stats[i], lines_of_the_file);
    lines_of_the_file += stats[i].lines;
    merge_read_stats(stats[0], std::move(stats[i]));
  }
  return std::move(stats[0]);
}

void Report::merge_durations(std::map<std::string, Durations, std::less<>>& into,
                             std::map<std::string, Durations, std::less<>>&& later) {
  // In the order the later report first read its names: the names kept are the first kMaxSpanNames of the run.
  std::vector<std::map<std::string, Durations, std::less<>>::iterator> in_order;
  for (auto it = later.begin(); it != later.end(); ++it) in_order.push_back(it);
  std::sort(in_order.begin(), in_order.end(), [](auto a, auto b) { return a->second.order() < b->second.order(); });
  for (auto it : in_order) {
    const std::string& name = it->first;
    Durations& d = it->second;
    if (auto found = into.find(name); found != into.end()) {
      found->second.merge(std::move(d));
    } else if (name != kOtherSpanNames && into.size() >= kMaxSpanNames) {
      spans_of_other_names_ += d.count();  // a name the one report would have counted under kOtherSpanNames
      into.try_emplace(std::string(kOtherSpanNames), into.size()).first->second.merge(std::move(d));
    } else {
      into.try_emplace(name, into.size()).first->second.merge(std::move(d));
    }
  }
}

void StepRecord::merge(const StepRecord& later) noexcept {
  if (later.step_ns != 0) step_ns = later.step_ns;  // a step read later replaces, as in Report::step()
  forward_backward_ns += later.forward_backward_ns;
  if (later.forward_backward_ns != 0) {
    forward_backward_start_ns = later.forward_backward_start_ns;
    forward_backward_end_ns = later.forward_backward_end_ns;
  }
  for (std::size_t k = 0; k < kPhaseCount; ++k) phase_ns[k] += later.phase_ns[k];
  microbatches = std::max(microbatches, later.microbatches);
}

void Report::merge_process(Process& into, Process&& later) {
  Timeline& t = into.timeline;
  t.first_ns = std::min(t.first_ns, later.timeline.first_ns);
  t.last_ns = std::max(t.last_ns, later.timeline.last_ns);
  t.save_ns += later.timeline.save_ns;
  t.evaluate_ns += later.timeline.evaluate_ns;
  // Steps by start, an earlier file's first among equal starts (as step() inserts them).
  std::vector<StepWindow> steps;
  steps.reserve(into.steps.size() + later.steps.size());
  std::merge(into.steps.begin(), into.steps.end(), later.steps.begin(), later.steps.end(), std::back_inserter(steps),
             [](const StepWindow& a, const StepWindow& b) { return a.start_ns < b.start_ns; });
  into.steps = std::move(steps);
  // What waited in either for a step the other read (a process's files cut between two threads): placed by settle().
  into.pending.merge(later.pending);
}

void Report::merge(Report&& later) {
  run_ids_.merge(later.run_ids_);
  services_.merge(later.services_);
  ranks_.merge(later.ranks_);
  host_of_rank_.merge(later.host_of_rank_);  // an earlier file's host stays, as identity() keeps the first
  clock_links_.merge(std::move(later.clock_links_));
  world_size_ = std::max(world_size_, later.world_size_);
  pipeline_size_ = std::max(pipeline_size_, later.pipeline_size_);
  data_parallel_size_ = std::max(data_parallel_size_, later.data_parallel_size_);
  tensor_size_ = std::max(tensor_size_, later.tensor_size_);
  spans_of_other_names_ += later.spans_of_other_names_;
  merge_durations(durations_, std::move(later.durations_));
  merge_durations(device_durations_, std::move(later.device_durations_));
  std::map<const Process*, const Process*> moved;  // the later report's processes, where they are now
  while (!later.processes_.empty()) {
    auto node = later.processes_.extract(later.processes_.begin());
    const Process* was = &node.mapped();
    if (auto found = processes_.find(node.key()); found != processes_.end()) {
      merge_process(found->second, std::move(node.mapped()));
      moved[was] = &found->second;
    } else {
      moved[was] = &processes_.insert(std::move(node)).position->second;  // the node moves, not the Process
    }
  }
  last_origin_ = nullptr;
  last_process_ = nullptr;
  name_classes_.clear();
  records_.merge(std::move(later.records_));
  device_records_.merge(std::move(later.device_records_));
  for (std::size_t k = 0; k < parts_seen_.size(); ++k) parts_seen_[k] = parts_seen_[k] || later.parts_seen_[k];
  for (std::size_t k = 0; k < device_parts_seen_.size(); ++k)
    device_parts_seen_[k] = device_parts_seen_[k] || later.device_parts_seen_[k];
  for (Event e : later.events_) {
    e.process = moved.at(e.process);
    events_.push_back(e);
  }
  first_iteration_ = std::min(first_iteration_, later.first_iteration_);
  truncated_ += later.truncated_;
  for (auto& [iteration, entry] : later.group_changes_) {
    auto& [change, ranks] = group_changes_[iteration];
    change = entry.first;
    ranks.merge(entry.second);
  }
  for (const auto& [key, value] : later.counters_) {
    LastValue& last = counters_[key];
    if (value.time_ns >= last.time_ns) last = value;
  }
  for (const auto& [iteration, value] : later.loss_) loss_[iteration] = value;
  for (auto& [name, by_rank] : later.training_)
    for (auto& [rank, points] : by_rank) {
      auto& mine = training_[name][rank];
      mine.insert(mine.end(), points.begin(), points.end());
    }
}

}  // namespace lens_tools
