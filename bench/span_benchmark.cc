// The span path: start + end of a span, beside the baselines of the same run (two steady_clock::now() calls,
// one relaxed atomic load). Spans go to an exporter that drops batches on arrival, so the figure is the
// training thread's cost, not the encoder's.
//
// Command:  ./scripts/bench.sh   (medians of 15 repetitions, random interleaving)
// Machine:  see docs/PERFORMANCE.md for the figures, the machine and the date.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>

#include "export/exporter.h"
#include "lens/megatron.h"
#include "lens/span.h"
#include "telemetry/setup_internal.h"

namespace {

namespace mg = lens::megatron::group;

class DiscardExporter final : public lens::internal::SpanExporter {
 public:
  lens::internal::ExportResult export_spans(const lens::internal::ExportBatch&, lens::internal::Deadline) override {
    return lens::internal::ExportResult::kSuccess;
  }
};

// Telemetry with every group but `layer` on; the sampler as asked.
void set_up(lens::TracesSampler sampler = lens::TracesSampler::kParentBasedAlwaysOn) {
  static lens::TracesSampler current = static_cast<lens::TracesSampler>(-1);
  static lens::Telemetry telemetry;
  if (current == sampler) return;
  lens::Config config;
  config.catalogue = lens::megatron::catalogue();
  config.enabled = true;
  config.span_groups = "per_step,microbatch";
  config.traces_sampler = sampler;
  telemetry = lens::internal::setup(config, 0, 1, {}, lens::SetupOptions{.reinit = true},
                                    std::make_unique<DiscardExporter>());
  current = sampler;
}

std::atomic<std::uint64_t> g_word{1};

void BM_Baseline_TwoSteadyClockReads(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  }
}
BENCHMARK(BM_Baseline_TwoSteadyClockReads);

void BM_Baseline_RelaxedAtomicLoad(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(g_word.load(std::memory_order_relaxed));
}
BENCHMARK(BM_Baseline_RelaxedAtomicLoad);

void BM_Span_NoAttributes(benchmark::State& state) {
  set_up();
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step");
  }
}
BENCHMARK(BM_Span_NoAttributes);

void BM_Span_FourAttributes(benchmark::State& state) {
  set_up();
  std::int64_t iteration = 0;
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", iteration}, {"megatron.num_microbatches", 8},
              {"megatron.loss", 2.31}, {"megatron.phase", "train"});
    ++iteration;
  }
}
BENCHMARK(BM_Span_FourAttributes);

void BM_Span_NestedChild(benchmark::State& state) {
  set_up();
  LENS_SPAN(mg::step, "megatron.train_step");
  for (auto _ : state) {
    LENS_SPAN(mg::microbatch, "megatron.microbatch.forward");
  }
}
BENCHMARK(BM_Span_NestedChild);

void BM_Span_DisabledGroup(benchmark::State& state) {
  set_up();
  for (auto _ : state) {
    LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", 3});
  }
}
BENCHMARK(BM_Span_DisabledGroup);

void BM_Span_SampledOut(benchmark::State& state) {
  set_up(lens::TracesSampler::kAlwaysOff);
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step");
  }
  set_up();
}
BENCHMARK(BM_Span_SampledOut);

void BM_Span_TwoProducerThreads(benchmark::State& state) {
  if (state.thread_index() == 0) set_up();
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step");
  }
}
BENCHMARK(BM_Span_TwoProducerThreads)->Threads(2)->UseRealTime();

}  // namespace
