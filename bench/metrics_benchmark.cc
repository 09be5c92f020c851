// Recording a measurement and a log record, beside the relaxed-atomic baseline of the same run
// (BM_Baseline_RelaxedAtomicLoad in span_benchmark.cc). A measurement without attributes is meant to stay within
// 20 ns.
//
// Command:  ./scripts/bench.sh   (medians of 15 repetitions, random interleaving)
// Machine and figures: docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include "bench_support.h"
#include "lens/log.h"
#include "lens/metrics.h"

namespace {

void BM_Metric_CounterAdd(benchmark::State& state) {
  lens::bench::set_up();
  static auto c = lens::metrics::counter<std::int64_t>("bench.counter");
  for (auto _ : state) c.add(1);
}
BENCHMARK(BM_Metric_CounterAdd);

void BM_Metric_GaugeRecord(benchmark::State& state) {
  lens::bench::set_up();
  static auto g = lens::metrics::gauge<double>("bench.gauge");
  double v = 0;
  for (auto _ : state) g.record(v += 0.5);
}
BENCHMARK(BM_Metric_GaugeRecord);

void BM_Metric_HistogramRecord(benchmark::State& state) {
  lens::bench::set_up();
  static auto h = lens::metrics::histogram<double>("bench.histogram", {.unit = "ms"});
  double v = 0;
  for (auto _ : state) {
    h.record(v);
    v = v > 9000 ? 0 : v + 37.5;
  }
}
BENCHMARK(BM_Metric_HistogramRecord);

void BM_Metric_CounterAddWithAttributes(benchmark::State& state) {
  lens::bench::set_up();
  static auto c = lens::metrics::counter<std::int64_t>("bench.counter.attributed");
  for (auto _ : state) c.add(1, {{"phase", "train"}, {"stage", 2}});
}
BENCHMARK(BM_Metric_CounterAddWithAttributes);

void BM_Log_Record(benchmark::State& state) {
  lens::bench::set_up();
  for (auto _ : state) lens::log(lens::Severity::kInfo, "checkpoint saved", {{"megatron.iteration", 100}});
}
BENCHMARK(BM_Log_Record);

}  // namespace
