// The span path: start + end of a span, beside the baselines of the same run (two steady_clock::now() calls,
// one relaxed atomic load). Spans go to an exporter that drops batches on arrival, so the figure is the
// training thread's cost, not the encoder's. Each span case runs kept (bursts with an untimed flush between
// them: nothing dropped) and as a tight loop, and prints its drop ratio.
//
// Command:  ./scripts/bench.sh   (medians of 15 repetitions, random interleaving); instructions a span:
//           bench/span_instructions.sh. Figures and machine: docs/PERFORMANCE.md ("Spans").
#include <benchmark/benchmark.h>

#include "bench_support.h"
#include "lens/megatron.h"
#include "lens/span.h"

namespace {

namespace mg = lens::megatron::group;

BENCHMARK(lens::bench::floor_two_steady_clock_reads)->Name("BM_Baseline_TwoSteadyClockReads");
BENCHMARK(lens::bench::floor_two_span_clock_reads)->Name("BM_Baseline_TwoSpanClockReads");
BENCHMARK(lens::bench::floor_relaxed_atomic_load)->Name("BM_Baseline_RelaxedAtomicLoad");

// Each span case runs two ways (the `kept` argument): kept:1, in bursts of kBurst spans with an untimed flush
// between them, so every span is kept and the figure is what a user pays; kept:0, a tight loop, where the
// producer outruns the export thread and part of the figure is the drop path. Both print `drop_ratio`.
template <typename Body>
void span_case(benchmark::State& state, Body body) {
  lens::bench::spans_in_bursts(state, lens::bench::set_up(), state.range(0) != 0, body);
}

#define LENS_SPAN_CASE(name) BENCHMARK(name)->ArgName("kept")->Arg(1)->Arg(0)

void BM_Span_NoAttributes(benchmark::State& state) {
  span_case(state, [] { LENS_SPAN(mg::step, "megatron.train_step"); });
}
LENS_SPAN_CASE(BM_Span_NoAttributes);

void BM_Span_FourAttributes(benchmark::State& state) {
  std::int64_t iteration = 0;
  span_case(state, [&] {
    LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", iteration}, {"megatron.num_microbatches", 8},
              {"megatron.loss", 2.31}, {"megatron.phase", "train"});
    ++iteration;
  });
}
LENS_SPAN_CASE(BM_Span_FourAttributes);

// A communication span carries lens.collective.seq, one relaxed atomic increment and one attribute more than
// BM_Span_NoAttributes, the same span in a group without it.
void BM_Span_Communication(benchmark::State& state) {
  span_case(state, [] { LENS_SPAN(mg::communication, "megatron.p2p.send_forward"); });
}
LENS_SPAN_CASE(BM_Span_Communication);

void BM_Span_NestedChild(benchmark::State& state) {
  lens::bench::set_up();
  LENS_SPAN(mg::step, "megatron.train_step");
  span_case(state, [] { LENS_SPAN(mg::microbatch, "megatron.microbatch.forward"); });
}
LENS_SPAN_CASE(BM_Span_NestedChild);

void BM_Span_DisabledGroup(benchmark::State& state) {
  lens::bench::set_up();
  for (auto _ : state) {
    LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", 3});
  }
}
BENCHMARK(BM_Span_DisabledGroup);

// Under a parent the sampler dropped: parentbased_always_on drops the child too.
void BM_Span_SampledOut(benchmark::State& state) {
  lens::bench::set_up();
  const lens::SpanContext dropped_parent =
      *lens::from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  lens::ContextScope scope(dropped_parent);
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step");
  }
}
BENCHMARK(BM_Span_SampledOut);

// Two threads at once: each flushes (untimed) after its own bursts in the kept form.
void BM_Span_TwoProducerThreads(benchmark::State& state) {
  span_case(state, [] { LENS_SPAN(mg::step, "megatron.train_step"); });
}
LENS_SPAN_CASE(BM_Span_TwoProducerThreads)->Threads(2)->UseRealTime();

}  // namespace
