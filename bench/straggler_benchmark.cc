// What the live straggler search (lens/straggler.h) costs a rank that exports nothing, per step: a step of a
// pipeline x data job with 8 micro-batches has 16 compute scopes (forward, backward) and 9 wait scopes (receives,
// the gradient sync), then end_step; every 20 steps, the window's summary. Beside it, in the same run: the same
// step with the scopes compiled in but the search off (STRAGGLER_INTERVAL=0), and with no lens call at all (the
// baseline). The work inside each scope is a counter bump, so the figures are lens's own cost. The gather itself
// is the consumer's all-reduce of 7 words per rank every 20 steps (not measured here: it is the collective's).
//
//
// The scoring rank's side, over a gather of N ranks in one stage (the worst case: the rule compares ranks within a
// stage), as the lowest exporting rank runs it every window: what score_stragglers costs the training thread
// (BM_ScoreStragglers_TrainingThread), the whole window on the scoring thread, metrics recorded
// (BM_ScoreStragglers_Whole), and the rule alone (BM_ScoreWindow).
//
// Command:  build/bench/lens_straggler_benchmark --benchmark_repetitions=15 --benchmark_min_time=0.2
//           --benchmark_report_aggregates_only=true   (medians)
// Machine and results: docs/PERFORMANCE.md ("Stragglers: per-step bookkeeping").
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "lens/straggler.h"
#include "watch/step_watch.h"
#include "watch/straggler_rule.h"

namespace {

constexpr int kMicrobatches = 8;
constexpr std::int64_t kInterval = 20;

std::int64_t g_work = 0;

inline void work() { benchmark::DoNotOptimize(++g_work); }

// One step's phases as pretrain_gpt times them.
template <bool kScopes>
void one_step() {
  for (int m = 0; m < kMicrobatches; ++m) {
    {
      if constexpr (kScopes) {
        LENS_STEP_PHASE(lens::StepPhase::kWait);  // the receive
        work();
      } else {
        work();
      }
    }
    for (int pass = 0; pass < 2; ++pass) {  // forward, backward
      if constexpr (kScopes) {
        LENS_STEP_PHASE(lens::StepPhase::kCompute);
        work();
      } else {
        work();
      }
    }
  }
  if constexpr (kScopes) {
    LENS_STEP_PHASE(lens::StepPhase::kWait);  // the gradient sync
    work();
  } else {
    work();
  }
}

void BM_Step_Baseline_NoLensCall(benchmark::State& state) {
  for (auto _ : state) one_step<false>();
}
BENCHMARK(BM_Step_Baseline_NoLensCall);

void BM_Step_SearchOff(benchmark::State& state) {
  lens::internal::configure_step_watch({});
  std::int64_t iteration = 0;
  for (auto _ : state) {
    one_step<true>();
    lens::end_step(++iteration);
  }
}
BENCHMARK(BM_Step_SearchOff);

// A rank that exports nothing: its phases summed, its window kept, its summary taken every kInterval steps.
void BM_Step_SearchOn_NonExportingRank(benchmark::State& state) {
  lens::internal::configure_step_watch({.interval = kInterval, .run_id = "bench", .rank = 1, .exports = false});
  std::int64_t iteration = 0;
  for (auto _ : state) {
    one_step<true>();
    lens::end_step(++iteration);
    if (lens::straggler_summary_due(iteration)) benchmark::DoNotOptimize(lens::take_straggler_summary(iteration, 0));
  }
  lens::internal::configure_step_watch({});
  state.counters["scopes_per_step"] = 2 * kMicrobatches + kMicrobatches + 1;
}
BENCHMARK(BM_Step_SearchOn_NonExportingRank);

// Medians that differ rank to rank (a spread of 1 %), one rank slowed by 60 ms a step, which its peers wait for.
std::vector<lens::StragglerSummary> gather(int ranks, std::int64_t iteration) {
  const std::int64_t tag = lens::internal::run_tag_of("bench");
  std::vector<lens::StragglerSummary> by_rank;
  for (int r = 0; r < ranks; ++r)
    by_rank.push_back({.run_tag = tag,
                       .iteration = iteration,
                       .stage = 0,
                       .steps = kInterval,
                       .compute_ns = 100'000'000 + (r * 7919 % 1000) * 1000 + (r == ranks / 2 ? 60'000'000 : 0),
                       .wait_ns = r == ranks / 2 ? 0 : 60'000'000 + (r * 104729 % 1000) * 1000,
                       .exports = r == 0 ? 1 : 0});
  return by_rank;
}

// The training thread's part: the gather handed over (copied); the scoring thread's work is waited for untimed.
void BM_ScoreStragglers_TrainingThread(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  lens::internal::configure_step_watch({.interval = kInterval, .run_id = "bench", .rank = 0, .exports = true});
  const std::vector<lens::StragglerSummary> by_rank = gather(ranks, kInterval);
  std::size_t flagged = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(lens::score_stragglers(kInterval, by_rank));
    state.PauseTiming();
    auto found = lens::take_straggler_findings(std::chrono::seconds(60));
    flagged = found ? found->flagged.size() : 0;
    state.ResumeTiming();
  }
  lens::internal::configure_step_watch({});
  state.counters["ranks"] = ranks;
  state.counters["flagged"] = static_cast<double>(flagged);  // 1: the slowed rank, so the work was done
}
BENCHMARK(BM_ScoreStragglers_TrainingThread)->Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond);

// The whole window: handed over, scored, recorded and logged on the scoring thread, findings taken (wall time).
void BM_ScoreStragglers_Whole(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  lens::internal::configure_step_watch({.interval = kInterval, .run_id = "bench", .rank = 0, .exports = true});
  const std::vector<lens::StragglerSummary> by_rank = gather(ranks, kInterval);
  std::size_t flagged = 0;
  for (auto _ : state) {
    lens::score_stragglers(kInterval, by_rank);
    auto found = lens::take_straggler_findings(std::chrono::seconds(60));
    flagged = found ? found->flagged.size() : 0;
  }
  lens::internal::configure_step_watch({});
  state.counters["ranks"] = ranks;
  state.counters["flagged"] = static_cast<double>(flagged);
}
BENCHMARK(BM_ScoreStragglers_Whole)->Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ScoreWindow(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  std::vector<lens::straggler::RankWindow> windows;
  for (const lens::StragglerSummary& s : gather(ranks, kInterval))
    windows.push_back({.rank = static_cast<int>(windows.size()),
                       .stage = 0,
                       .steps = s.steps,
                       .compute_ns = static_cast<double>(s.compute_ns),
                       .wait_ns = static_cast<double>(s.wait_ns)});
  for (auto _ : state) benchmark::DoNotOptimize(lens::straggler::score_window(windows));
  state.counters["ranks"] = ranks;
}
BENCHMARK(BM_ScoreWindow)->Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond);

}  // namespace
