// What training produces is kept: spans from a thread at full speed (no attributes, and four), in bursts, and from
// two threads, with the default batch settings (queue 2048, batch 512, delay 5 s) into an exporter that discards each
// batch, so the figure is the pipeline's (wake-up, drain, batching), not an encoder's. Each case prints what was
// dropped, the process's CPU per span and the export side's: the process's CPU minus the producing threads'.
//
// Command:  build/bench/lens_keep_benchmark --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// Figures and machine: docs/PERFORMANCE.md ("Keeping what training produces"); the OpenTelemetry C++ SDK beside lens:
// bench/otel_cpp_side_by_side.cc.
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "lens/span.h"

namespace {

namespace mg = lens::megatron::group;
using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// What the producing threads spent: wall seconds while producing, and their CPU seconds (every producer's).
struct Produced {
  double seconds = 0;
  double producer_cpu_seconds = 0;
};

// One setup per case with the defaults, spans produced by `produce`, shut down, and the counts as counters:
// produced, exported, dropped, drop_ratio, produced_per_s (the producers' pace), exported_per_s (to the end of
// shutdown), process_cpu_ns_per_span (every thread of the process, the export thread included) and
// export_side_cpu_ns_per_span: the process's CPU minus the producing threads', per span (what the export thread
// spends to drain, batch, convert times and count, the exporter itself discarding).
template <typename Produce>
void run_case(benchmark::State& state, Produce produce) {
  for (auto _ : state) {
    lens::Telemetry t = lens::bench::fresh_setup("step");
    const double cpu_before = lens::bench::process_cpu_seconds();
    const auto start = Clock::now();
    const Produced p = produce();
    t.shutdown(std::chrono::seconds(60));
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu_s = lens::bench::process_cpu_seconds() - cpu_before;
    const lens::SpanStats s = t.span_stats();
    if (s.exported + s.dropped() != s.produced) state.SkipWithError("exported + dropped != produced");
    const double produced = static_cast<double>(s.produced);
    state.counters["produced"] = produced;
    state.counters["exported"] = static_cast<double>(s.exported);
    state.counters["dropped"] = static_cast<double>(s.dropped());
    state.counters["drop_ratio"] = produced > 0 ? static_cast<double>(s.dropped()) / produced : 0;
    state.counters["produced_per_s"] = produced / p.seconds;
    state.counters["exported_per_s"] = static_cast<double>(s.exported) / total_s;
    state.counters["process_cpu_ns_per_span"] = cpu_s * 1e9 / produced;
    state.counters["producer_cpu_ns_per_span"] = p.producer_cpu_seconds * 1e9 / produced;
    state.counters["export_side_cpu_ns_per_span"] = (cpu_s - p.producer_cpu_seconds) * 1e9 / produced;
  }
}

// Spans from this thread as fast as it can, with no attributes or four (2 int, 1 double, 1 literal string).
Produced tight_loop(std::int64_t spans, bool four_attributes = false) {
  const double cpu_start = thread_cpu_seconds();
  const auto start = Clock::now();
  if (four_attributes) {
    for (std::int64_t i = 0; i < spans; ++i) {
      LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", i}, {"megatron.num_microbatches", 8},
                {"megatron.loss", 2.31}, {"megatron.phase", "train"});
    }
  } else {
    for (std::int64_t i = 0; i < spans; ++i) {
      LENS_SPAN(mg::step, "megatron.train_step");
    }
  }
  return {std::chrono::duration<double>(Clock::now() - start).count(), thread_cpu_seconds() - cpu_start};
}

void BM_Keep_OneMillionSpansOneThread(benchmark::State& state) {
  run_case(state, [&] { return tight_loop(1'000'000, state.range(0) != 0); });
}
BENCHMARK(BM_Keep_OneMillionSpansOneThread)
    ->ArgName("attributes")
    ->Arg(0)
    ->Arg(4)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_Keep_OneMillionSpansTwoThreads(benchmark::State& state) {
  run_case(state, [] {
    const auto start = Clock::now();
    Produced each[2];
    std::vector<std::thread> threads;
    for (auto& p : each) threads.emplace_back([&p] { p = tight_loop(500'000); });
    for (auto& t : threads) t.join();
    return Produced{std::chrono::duration<double>(Clock::now() - start).count(),
                    each[0].producer_cpu_seconds + each[1].producer_cpu_seconds};
  });
}
BENCHMARK(BM_Keep_OneMillionSpansTwoThreads)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// A training step's worth of spans (every group on, 24 layers, 8 micro-batches: several thousand) and then the
// rest of the step: 100 bursts of 10,000 spans, 10 ms apart. Nothing may be dropped.
void BM_Keep_BurstsOfTenThousandSpans(benchmark::State& state) {
  run_case(state, [] {
    Produced total;
    for (int burst = 0; burst < 100; ++burst) {
      const Produced p = tight_loop(10'000);
      total.seconds += p.seconds;
      total.producer_cpu_seconds += p.producer_cpu_seconds;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return total;
  });
}
BENCHMARK(BM_Keep_BurstsOfTenThousandSpans)->Iterations(1)->Unit(benchmark::kMillisecond);

// Resident memory of the process now, KiB.
double rss_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024.0;
}

// What a recording thread costs while it lives: 200 threads alive at once, each after one span, against 200
// threads that record nothing; at the default queue size, 65536 and 262144 (OTEL_BSP_MAX_QUEUE_SIZE, argument).
void BM_Keep_MemoryPerRecordingThread(benchmark::State& state) {
  constexpr int kThreads = 200;
  for (auto _ : state) {
    lens::Config config;
    config.span_groups = "step";
    config.span_batch.max_queue_size = state.range(0);
    lens::Telemetry t = lens::bench::setup_discarding(config);
    auto resident_with = [](bool record) {
      std::barrier started(kThreads + 1), done(kThreads + 1);
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, record] {
          if (record) {
            LENS_SPAN(mg::step, "megatron.train_step");
          }
          started.arrive_and_wait();
          done.arrive_and_wait();
        });
      started.arrive_and_wait();
      const double kib = rss_kib();
      done.arrive_and_wait();
      for (auto& th : threads) th.join();
      return kib;
    };
    const double idle = resident_with(false);  // thread stacks, faulted in once
    const double recording = resident_with(true);
    state.counters["KiB_per_recording_thread"] = (recording - idle) / kThreads;
    t.shutdown();
  }
}
BENCHMARK(BM_Keep_MemoryPerRecordingThread)->ArgName("queue")->Arg(2048)->Arg(65536)->Arg(262144)->Iterations(1);

}  // namespace
