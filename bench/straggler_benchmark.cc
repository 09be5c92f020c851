// What the live straggler search (lens/straggler.h) costs a rank that exports nothing, per step: a step of a
// pipeline x data job with 8 micro-batches has 16 compute scopes (forward, backward) and 9 wait scopes (receives,
// the gradient sync), then end_step; every 20 steps, the window's summary. Beside it, in the same run: the same
// step with the scopes compiled in but the search off (STRAGGLER_INTERVAL=0), and with no lens call at all (the
// baseline). The work inside each scope is a counter bump, so the figures are lens's own cost. The gather itself
// is the consumer's all-reduce of 7 words per rank every 20 steps (not measured here: it is the collective's).
//
// Command:  build/bench/lens_straggler_benchmark --benchmark_repetitions=15 --benchmark_min_time=0.2
//           --benchmark_report_aggregates_only=true   (medians)
// Machine and results: docs/PERFORMANCE.md ("Stragglers: per-step bookkeeping").
#include <benchmark/benchmark.h>

#include <cstdint>

#include "lens/straggler.h"
#include "watch/step_watch.h"

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

}  // namespace
