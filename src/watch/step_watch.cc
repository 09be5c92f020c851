// Per-step compute and wait sums, the window of steps, and the exporting rank's scoring (lens/straggler.h).
#include "watch/step_watch.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/dcheck.h"
#include "common/log.h"
#include "common/signal_free_thread.h"
#include "hang/snapshot.h"
#include "lens/log.h"
#include "lens/metrics.h"
#include "lens/straggler.h"
#include "metrics/instruments.h"
#include "watch/progress.h"
#include "watch/straggler_rule.h"

namespace lens::internal {

std::atomic<bool> g_step_phases_on{false};

namespace {

// Summed by the training thread (and any thread a consumer times a phase on), emptied at each end_step.
std::atomic<std::uint64_t> g_phase_ticks[2];
// Goodput's clock: read at collection by the metric thread.
std::atomic<std::uint64_t> g_setup_steady_ns{0}, g_in_steps_ns{0};
std::atomic<std::int64_t> g_steps{0}, g_last_iteration{-1};

struct Window {
  std::mutex mutex;
  std::int64_t interval = 0;
  std::int64_t run_tag = 0;
  std::string run_id;
  int rank = 0, local_rank = 0;
  std::string host;  // host.name, sent with each summary
  bool exports = false;
  // Ticks to nanoseconds, measured from the anchor to each window's end.
  std::uint64_t tick0 = 0, steady0 = 0;
  std::vector<double> compute_ticks, wait_ticks;  // one entry per step in the window
};

Window& window() {
  static auto* w = new Window;  // used from any thread until exit
  return *w;
}

double nanos_per_tick(const Window& w) {
  const std::uint64_t ticks = now_ticks() - w.tick0, nanos = steady_nanos() - w.steady0;
  return ticks > 0 && nanos > 0 ? static_cast<double>(nanos) / static_cast<double>(ticks) : 1.0;
}

struct Instruments {
  metrics::Gauge<double> score = metrics::gauge<double>(
      "lens.straggler.score",
      {.description = "A rank's median compute per step over the last window, over its stage peers' (1: as fast)."});
  metrics::Gauge<std::int64_t> flagged = metrics::gauge<std::int64_t>(
      "lens.straggler.flagged", {.description = "1 when the rank was named a straggler in the last window, else 0."});
  metrics::Gauge<std::int64_t> flagged_windows = metrics::gauge<std::int64_t>(
      "lens.straggler.flagged_windows",
      {.description =
           "Windows in a row, up to the last, in which the rank was named a straggler (0: not in the last)."});
  metrics::Gauge<double> compute = metrics::gauge<double>(
      "lens.step.compute",
      {.description = "A rank's median forward + backward time per step over the last window.", .unit = "ms"});
  metrics::Gauge<double> wait = metrics::gauge<double>(
      "lens.step.wait",
      {.description = "A rank's median pipeline-receive + gradient-sync wait per step over the last window.",
       .unit = "ms"});
  metrics::Counter<std::int64_t> refused = metrics::counter<std::int64_t>(
      "lens.straggler.refused", {.description = "Summaries refused: another run's or window's, or impossible times."});
  metrics::Gauge<std::int64_t> missing = metrics::gauge<std::int64_t>(
      "lens.straggler.missing", {.description = "Ranks that sent no summary to the last gather."});
};

Instruments& instruments() {
  static auto* i = new Instruments;
  return *i;
}

enum class SlotKind { kValid, kMissing, kRefused };

SlotKind classify(const StragglerSummary& s, std::int64_t run_tag, std::int64_t iteration) {
  if (s.run_tag == 0 && s.steps == 0) return SlotKind::kMissing;
  if (s.run_tag != run_tag || s.iteration != iteration) return SlotKind::kRefused;
  if (s.steps <= 0 || s.stage < 0 || s.compute_ns < 0 || s.wait_ns < 0 || s.exports < 0 || s.exports > 1 ||
      s.local_rank < 0 || s.tensor_rank < 0)
    return SlotKind::kRefused;
  return SlotKind::kValid;
}

// The lowest rank that exports, among valid summaries: the one that records (every rank computes the same).
int scoring_rank(std::span<const StragglerSummary> by_rank, std::int64_t run_tag, std::int64_t iteration) {
  for (std::size_t rank = 0; rank < by_rank.size(); ++rank)
    if (by_rank[rank].exports == 1 && classify(by_rank[rank], run_tag, iteration) == SlotKind::kValid)
      return static_cast<int>(rank);
  return -1;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string describe(const StragglerFindings& f, std::int64_t steps) {
  // With tensor parallelism a rank is named by its stage and its tensor-parallel rank, the position its peers share.
  const bool tensor_parallel =
      std::any_of(f.ranks.begin(), f.ranks.end(), [](const StragglerVerdict& v) { return v.tensor_rank > 0; });
  std::string text;
  for (const StragglerVerdict& v : f.ranks) {
    if (!v.flagged) continue;
    char place[64], line[400];
    if (tensor_parallel)
      std::snprintf(place, sizeof place, "stage %d, tensor-parallel rank %d", v.stage, v.tensor_rank);
    else
      std::snprintf(place, sizeof place, "stage %d", v.stage);
    std::snprintf(line, sizeof line,
                  "%srank %d (%s) is a straggler over the %lld steps to iteration %lld: it computes %.2fx its "
                  "peers' (%.1f ms against %.1f ms a step) and waits %.1f ms against their %.1f ms",
                  text.empty() ? "" : "; ", v.rank, place, static_cast<long long>(steps),
                  static_cast<long long>(f.iteration), v.score, v.compute_ms, v.peer_compute_ms, v.wait_ms,
                  v.peer_wait_ms);
    text += line;
    if (!v.host.empty()) text += " (host " + v.host + ", local rank " + std::to_string(v.local_rank) + ")";
  }
  if (text.empty()) text = "no straggler over the steps to iteration " + std::to_string(f.iteration);
  if (!f.missing.empty()) text += "; no summary from ranks " + rank_list(f.missing);
  if (!f.refused.empty()) text += "; refused the summaries of ranks " + rank_list(f.refused);
  return text;
}

// A series about rank `v`, recorded by the scoring rank: its own rank, stage, host, local rank and service instance
// (`<run id>-rank<R>`, as that rank's resource says), never the scorer's, so an alert names the machine to look at.
void record_findings(const StragglerFindings& f, const std::string& run_id) {
  Instruments& m = instruments();
  for (const StragglerVerdict& v : f.ranks) {
    const std::string instance = run_id + "-rank" + std::to_string(v.rank);
    const std::initializer_list<Attribute> about = {{"dl.rank", v.rank},
                                                    {"dl.pipeline_parallel.rank", v.stage},
                                                    {"dl.tensor_parallel.rank", v.tensor_rank},
                                                    {"dl.local_rank", v.local_rank},
                                                    {"host.name", std::string_view(v.host)},
                                                    {"service.instance.id", std::string_view(instance)}};
    m.compute.record(v.compute_ms, about);
    m.wait.record(v.wait_ms, about);
    if (!v.scored) continue;
    m.score.record(v.score, about);
    m.flagged.record(v.flagged ? 1 : 0, about);
    m.flagged_windows.record(v.flagged_windows, about);
  }
  m.missing.record(static_cast<std::int64_t>(f.missing.size()));
  if (!f.refused.empty()) m.refused.add(static_cast<std::int64_t>(f.refused.size()));
}

void log_flagged(const StragglerFindings& f) {
  for (const StragglerVerdict& v : f.ranks) {
    if (!v.flagged) continue;
    lens::log(Severity::kWarn, f.text,
              {{"dl.rank", v.rank},
               {"dl.pipeline_parallel.rank", v.stage},
               {"dl.tensor_parallel.rank", v.tensor_rank},
               {"dl.local_rank", v.local_rank},
               {"host.name", std::string_view(v.host)},
               {"lens.straggler.score", v.score},
               {"megatron.iteration", f.iteration}});
  }
  if (!f.flagged.empty()) log_info("%s", f.text.c_str());  // once a window: never floods
}

// Each rank's count of windows in a row in which it was named a straggler, up to the last window scored, for the run
// the step watch is configured for (configure_step_watch starts it again).
struct Streaks {
  std::mutex mutex;
  std::map<int, std::int64_t> by_rank;
};

Streaks& streaks() {
  static auto* s = new Streaks;  // the scoring thread uses it until exit
  return *s;
}

// Sets each verdict's flagged_windows from the windows before; a rank absent from this window starts again.
void count_flagged_windows(std::vector<StragglerVerdict>& verdicts) {
  Streaks& s = streaks();
  std::lock_guard lock(s.mutex);
  std::map<int, std::int64_t> now;
  for (StragglerVerdict& v : verdicts) {
    const auto before = s.by_rank.find(v.rank);
    v.flagged_windows = v.flagged ? (before != s.by_rank.end() ? before->second : 0) + 1 : 0;
    now[v.rank] = v.flagged_windows;
  }
  s.by_rank = std::move(now);
}

// A gathered window on its way to the scoring thread.
struct Gathered {
  std::int64_t iteration = 0, run_tag = 0;
  std::vector<StragglerSummary> by_rank;
  std::string run_id;
};

StragglerFindings score(const Gathered& g) {
  StragglerFindings f;
  f.iteration = g.iteration;
  std::vector<straggler::RankWindow> windows;
  std::int64_t steps = 0;
  for (std::size_t rank = 0; rank < g.by_rank.size(); ++rank) {
    const StragglerSummary& s = g.by_rank[rank];
    switch (classify(s, g.run_tag, g.iteration)) {
      case SlotKind::kMissing: f.missing.push_back(static_cast<int>(rank)); continue;
      case SlotKind::kRefused: f.refused.push_back(static_cast<int>(rank)); continue;
      case SlotKind::kValid: break;
    }
    steps = std::max(steps, s.steps);
    windows.push_back({.rank = static_cast<int>(rank),
                       .stage = static_cast<int>(s.stage),
                       .tensor_rank = static_cast<int>(s.tensor_rank),
                       .steps = s.steps,
                       .compute_ns = static_cast<double>(s.compute_ns),
                       .wait_ns = static_cast<double>(s.wait_ns)});
  }
  for (const straggler::Score& s : straggler::score_window(windows)) {
    const StragglerSummary& summary = g.by_rank[static_cast<std::size_t>(s.rank)];
    f.ranks.push_back({.rank = s.rank,
                       .stage = s.stage,
                       .tensor_rank = s.tensor_rank,
                       .local_rank = static_cast<int>(summary.local_rank),
                       .host = summary.host_name(),
                       .scored = s.scored,
                       .flagged = s.flagged,
                       .score = s.score,
                       .compute_ms = s.compute_ns / 1e6,
                       .wait_ms = s.wait_ns / 1e6,
                       .peer_compute_ms = s.peer_compute_ns / 1e6,
                       .peer_wait_ms = s.peer_wait_ns / 1e6});
    if (s.flagged) f.flagged.push_back(s.rank);
  }
  count_flagged_windows(f.ranks);
  f.text = describe(f, steps);
  return f;
}

// The scoring thread (lens-straggler), started by the first window handed over and kept for the process: one window
// waiting at most (a newer one replaces it), the latest findings until taken.
struct Scoring {
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Gathered> waiting;
  bool scoring = false;  // the thread holds a window
  std::optional<StragglerFindings> finished;
  bool started = false;
  std::function<void()> observer;  // tests: called where a window is scored
};

Scoring& scoring() {
  static auto* s = new Scoring;  // the thread uses it until exit
  return *s;
}

void score_and_record(const Gathered& g, Scoring& s) {
  std::optional<StragglerFindings> f;
  try {
    f = score(g);
    record_findings(*f, g.run_id);
    log_flagged(*f);
  } catch (...) {  // out of memory: this window is not scored
  }
  std::lock_guard lock(s.mutex);
  if (f) s.finished = std::move(f);
}

void run_scoring_thread(Scoring& s) {
  std::unique_lock lock(s.mutex);
  for (;;) {
    s.changed.wait(lock, [&] { return s.waiting.has_value(); });
    Gathered g = std::move(*s.waiting);
    s.waiting.reset();
    s.scoring = true;
    const std::function<void()> observer = s.observer;
    lock.unlock();
    if (observer) observer();
    score_and_record(g, s);
    lock.lock();
    s.scoring = false;
    s.changed.notify_all();
  }
}

// Hands `g` to the scoring thread; where no thread can be started, scores it here.
void hand_over(Gathered g) {
  Scoring& s = scoring();
  {
    std::lock_guard lock(s.mutex);
    if (!s.started) {
      try {
        start_signal_free_thread("the straggler scoring thread", "lens-straggler", [&s] {
          run_scoring_thread(s);
        }).detach();
        s.started = true;
      } catch (const ConfigError& e) {
        log_warning("%s: straggler windows are scored on the calling thread", e.what());
      }
    }
    if (s.started) {
      s.waiting = std::move(g);
      s.changed.notify_all();
      return;
    }
  }
  score_and_record(g, s);
}

std::optional<StragglerFindings> take_findings(std::chrono::milliseconds wait) {
  Scoring& s = scoring();
  std::unique_lock lock(s.mutex);
  s.changed.wait_for(lock, wait, [&] { return s.finished.has_value() || (!s.waiting && !s.scoring); });
  return std::exchange(s.finished, std::nullopt);
}

}  // namespace

void set_scoring_observer_for_testing(std::function<void()> observer) {
  Scoring& s = scoring();
  std::lock_guard lock(s.mutex);
  s.observer = std::move(observer);
}

std::int64_t run_tag_of(std::string_view run_id) noexcept {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : run_id) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>((h >> 2) | 1);
}

StepTimeTotals step_time_totals() noexcept {
  return {.setup_steady_ns = g_setup_steady_ns.load(std::memory_order_relaxed),
          .in_steps_ns = g_in_steps_ns.load(std::memory_order_relaxed),
          .steps = g_steps.load(std::memory_order_relaxed),
          .last_iteration = g_last_iteration.load(std::memory_order_relaxed)};
}

void configure_step_watch(const StepWatchSettings& settings) noexcept {
  set_collect_hook(&record_progress);  // the heartbeat and goodput are taken at each collection
  g_setup_steady_ns.store(steady_nanos(), std::memory_order_relaxed);
  g_in_steps_ns.store(0, std::memory_order_relaxed);
  g_steps.store(0, std::memory_order_relaxed);
  g_last_iteration.store(-1, std::memory_order_relaxed);
  Window& w = window();
  std::lock_guard lock(w.mutex);
  w.interval = settings.interval;
  w.run_tag = run_tag_of(settings.run_id);
  w.run_id = settings.run_id;
  w.rank = settings.rank;
  w.local_rank = settings.local_rank;
  w.host = settings.host;
  w.exports = settings.exports && settings.interval > 0;
  w.tick0 = now_ticks();
  w.steady0 = steady_nanos();
  w.compute_ticks.clear();
  w.wait_ticks.clear();
  for (auto& t : g_phase_ticks) t.store(0, std::memory_order_relaxed);
  g_step_phases_on.store(settings.interval > 0, std::memory_order_relaxed);
  Streaks& s = streaks();
  std::lock_guard streaks_lock(s.mutex);
  s.by_rank.clear();
}

namespace {
// The compute scopes open on this thread: a wait inside one (a tensor-parallel all-reduce inside a layer's forward)
// is taken out of it, so a rank that waits for its tensor-parallel peers does not look like it computes longer.
thread_local int t_open_compute = 0;
}  // namespace

std::uint64_t step_phase_begin(StepPhase phase) noexcept {
  if (phase == StepPhase::kCompute) ++t_open_compute;
  return now_ticks();
}

void step_phase_end(StepPhase phase, std::uint64_t begin) noexcept {
  const std::size_t i = static_cast<std::size_t>(phase);
  LENS_DCHECK(i < 2);
  const std::uint64_t ticks = now_ticks() - begin;
  g_phase_ticks[i].fetch_add(ticks, std::memory_order_relaxed);
  if (phase == StepPhase::kCompute) {
    --t_open_compute;
  } else if (t_open_compute > 0) {
    // Modulo 2^64: the enclosing compute scope adds its whole time when it ends, before end_step reads the sum.
    g_phase_ticks[0].fetch_sub(ticks, std::memory_order_relaxed);
  }
}

}  // namespace lens::internal

namespace lens {
LENS_ABI_NAMESPACE_BEGIN

void end_step(std::int64_t iteration) noexcept {
  internal::g_last_iteration.store(iteration, std::memory_order_relaxed);
  // Goodput: the step ran from its iteration boundary (lens::at_iteration_boundary) to now.
  if (const internal::IterationProgress p = internal::iteration_progress();
      p.boundary_nanos != 0 && p.iteration == iteration) {
    internal::g_in_steps_ns.fetch_add(internal::steady_nanos() - p.boundary_nanos, std::memory_order_relaxed);
    internal::g_steps.fetch_add(1, std::memory_order_relaxed);
  }
  if (!internal::g_step_phases_on.load(std::memory_order_relaxed)) return;
  const auto compute = static_cast<double>(internal::g_phase_ticks[0].exchange(0, std::memory_order_relaxed));
  const auto wait = static_cast<double>(internal::g_phase_ticks[1].exchange(0, std::memory_order_relaxed));
  internal::Window& w = internal::window();
  std::lock_guard lock(w.mutex);
  try {
    // A consumer that never takes a summary keeps one window's worth, not the run's.
    if (static_cast<std::int64_t>(w.compute_ticks.size()) >= w.interval) {
      w.compute_ticks.clear();
      w.wait_ticks.clear();
    }
    w.compute_ticks.push_back(compute);
    w.wait_ticks.push_back(wait);
  } catch (...) {  // out of memory: this step is not in the window
  }
}

bool straggler_summary_due(std::int64_t iteration) noexcept {
  internal::Window& w = internal::window();
  std::lock_guard lock(w.mutex);
  return w.interval > 0 && iteration > 0 && iteration % w.interval == 0;
}

StragglerSummary take_straggler_summary(std::int64_t iteration, int stage, int tensor_rank) noexcept {
  internal::Window& w = internal::window();
  std::lock_guard lock(w.mutex);
  if (w.interval == 0 || w.compute_ticks.empty()) return {};
  const double scale = internal::nanos_per_tick(w);
  StragglerSummary s{.run_tag = w.run_tag,
                     .iteration = iteration,
                     .stage = stage,
                     .steps = static_cast<std::int64_t>(w.compute_ticks.size()),
                     .compute_ns = std::llround(straggler::median_of(w.compute_ticks) * scale),
                     .wait_ns = std::llround(straggler::median_of(w.wait_ticks) * scale),
                     .exports = w.exports ? 1 : 0,
                     .local_rank = w.local_rank,
                     .tensor_rank = tensor_rank};
  s.set_host_name(w.host);
  w.compute_ticks.clear();
  w.wait_ticks.clear();
  return s;
}

bool score_stragglers(std::int64_t iteration, std::span<const StragglerSummary> by_rank) noexcept {
  try {
    std::int64_t run_tag = 0;
    int my_rank = 0;
    std::string run_id;
    {
      internal::Window& w = internal::window();
      std::lock_guard lock(w.mutex);
      if (!w.exports) return false;
      run_tag = w.run_tag;
      my_rank = w.rank;
      run_id = w.run_id;
    }
    if (internal::scoring_rank(by_rank, run_tag, iteration) != my_rank) return false;
    internal::hand_over(
        {iteration, run_tag, std::vector<StragglerSummary>(by_rank.begin(), by_rank.end()), std::move(run_id)});
    return true;
  } catch (...) {  // out of memory: this window is not scored
    return false;
  }
}

std::optional<StragglerFindings> take_straggler_findings(std::chrono::milliseconds wait) noexcept {
  return internal::take_findings(wait);
}

LENS_ABI_NAMESPACE_END
}  // namespace lens
