// The span-group check: lens::is_enabled() on an enabled and on a disabled group, beside its baseline, a plain
// relaxed atomic load + bit test + branch measured in the same run. Target: both within 1.5x of the baseline.
//
// Command:  ./scripts/bench.sh   (lens_benchmarks --benchmark_repetitions=15 --benchmark_min_time=0.2
//           --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true; medians)
// Figures and machine: docs/PERFORMANCE.md ("Span-group check"). The three loops compile to the same five
// instructions (load, and, cmp, sbb, loop), so each figure is read against the baseline of its own run.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>

#include "bench_support.h"

namespace {

namespace mg = lens::megatron::group;

std::atomic<std::uint64_t> g_baseline_bits{mg::step.bit()};

// What is_enabled must not cost more than: the same load, test and branch on an atomic of our own.
void BM_Baseline_RelaxedLoadAndBranch(benchmark::State& state) {
  std::uint64_t hits = 0;
  for (auto _ : state) {
    if (g_baseline_bits.load(std::memory_order_relaxed) & mg::step.bit()) ++hits;
    benchmark::DoNotOptimize(hits);
  }
}
BENCHMARK(BM_Baseline_RelaxedLoadAndBranch);

void BM_IsEnabled_EnabledGroup(benchmark::State& state) {
  lens::bench::set_up();
  std::uint64_t hits = 0;
  for (auto _ : state) {
    if (LENS_GROUP_ENABLED(mg::step)) ++hits;
    benchmark::DoNotOptimize(hits);
  }
  if (hits == 0) state.SkipWithError("step should be enabled");
}
BENCHMARK(BM_IsEnabled_EnabledGroup);

void BM_IsEnabled_DisabledGroup(benchmark::State& state) {
  lens::bench::set_up();
  std::uint64_t hits = 0;
  for (auto _ : state) {
    if (LENS_GROUP_ENABLED(mg::layer)) ++hits;
    benchmark::DoNotOptimize(hits);
  }
  if (hits != 0) state.SkipWithError("layer should be disabled");
}
BENCHMARK(BM_IsEnabled_DisabledGroup);

}  // namespace
