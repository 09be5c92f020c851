// The whole pipeline: one thread produces 10 million spans as fast as it can into the file exporter (queue
// 65536); the background thread encodes OTLP/JSON and appends to a file. Reports the sustained exported
// spans/s and the peak RSS; checks exported + dropped == produced.
//
// Command:  build/bench/lens_pipeline_benchmark   (figures in docs/PERFORMANCE.md)
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "lens/megatron.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace {

namespace mg = lens::megatron::group;

void BM_Pipeline_TenMillionSpansIntoTheFileExporter(benchmark::State& state) {
  const std::int64_t spans = state.range(0);
  std::string dir = "/tmp/lens-pipeline-benchmark-" + std::to_string(::getpid());
  for (auto _ : state) {
    lens::Config config;
    config.catalogue = lens::megatron::catalogue();
    config.enabled = true;
    config.span_groups = "step";
    config.exporter = lens::Exporter::kFile;
    config.file_dir = dir;
    config.run_id = "bench";
    config.span_batch.max_queue_size = 65536;
    config.span_batch.max_export_batch_size = 4096;
    config.span_batch.schedule_delay_ms = 50;
    lens::Telemetry t = lens::setup_telemetry(config, {.rank = 0, .world_size = 1, .reinit = true});
    auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < spans; ++i) {
      LENS_SPAN(mg::step, "megatron.train_step");
    }
    auto produced_at = std::chrono::steady_clock::now();
    t.shutdown(std::chrono::seconds(60));
    auto end = std::chrono::steady_clock::now();
    lens::SpanStats s = t.span_stats();
    if (s.exported + s.dropped() != s.produced || s.produced != static_cast<std::uint64_t>(spans))
      state.SkipWithError("exported + dropped != produced");
    double seconds = std::chrono::duration<double>(end - start).count();
    state.counters["produced"] = static_cast<double>(s.produced);
    state.counters["exported"] = static_cast<double>(s.exported);
    state.counters["dropped"] = static_cast<double>(s.dropped());
    state.counters["produce_ns_per_span"] =
        std::chrono::duration<double, std::nano>(produced_at - start).count() / static_cast<double>(spans);
    state.counters["exported_per_s"] = static_cast<double>(s.exported) / seconds;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
    std::filesystem::remove_all(dir);
  }
}
BENCHMARK(BM_Pipeline_TenMillionSpansIntoTheFileExporter)
    ->Arg(10'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
