// Telemetry for the benchmarks of one program: one setup shared by all of them, with an exporter that
// drops batches on arrival, so the figures are the training thread's cost, not the encoder's.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/clock.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"
#include "signals/exporter.h"
#include "telemetry/setup_internal.h"

namespace lens::bench {

using internal::DiscardExporter;

inline Telemetry setup_discarding(Config config) {
  config.catalogue = megatron::catalogue();
  config.enabled = true;
  return internal::setup(config, {.rank = 0, .world_size = 1, .reinit = true}, std::make_unique<DiscardExporter>());
}

// Every group of `per_step` and `microbatch` on (so `step` is on and `layer` is off), the default sampler
// (parentbased_always_on), metrics and logs on. Set up once: a new setup would give the next benchmark cold
// queues to fault in.
inline Telemetry& set_up() {
  static Telemetry telemetry = setup_discarding([] {
    Config config;
    config.span_groups = "per_step,microbatch";
    config.logs_enabled = true;
    return config;
  }());
  return telemetry;
}

// A setup of its own with the default batch settings and `groups` on.
inline Telemetry fresh_setup(std::string groups) {
  Config config;
  config.span_groups = std::move(groups);
  return setup_discarding(std::move(config));
}

// Every thread's CPU time so far (the export side's included), in seconds.
inline double process_cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

// Runs `body` once an iteration. kept: in bursts of kBurst with an untimed flush between them, so every span is kept
// and the figure is what a user pays; else a tight loop, where the producer may outrun the export thread and part of
// the figure is the drop path. Sets the `drop_ratio` counter either way (the run's, from its first thread: Google
// Benchmark sums threads' counters), and on one thread `process_cpu_ns`, every thread's CPU over the spans made.
inline constexpr std::int64_t kBurst = 1000;
// Never inlined: callgrind counts a span's instructions inside it (--toggle-collect='*spans_in_bursts*').
template <typename Body>
__attribute__((noinline)) void spans_in_bursts(benchmark::State& state, Telemetry& t, bool kept, Body body) {
  t.force_flush();
  const SpanStats before = t.span_stats();
  const double cpu_before = process_cpu_seconds();
  std::int64_t n = 0;
  for (auto _ : state) {
    body();
    if (kept && ++n == kBurst) {
      state.PauseTiming();
      t.force_flush();
      n = 0;
      state.ResumeTiming();
    }
  }
  t.force_flush();
  if (state.thread_index() != 0) return;
  const SpanStats after = t.span_stats();
  const double produced = static_cast<double>(after.produced - before.produced);
  state.counters["drop_ratio"] = produced > 0 ? static_cast<double>(after.dropped() - before.dropped()) / produced : 0;
  if (state.threads() == 1)
    state.counters["process_cpu_ns"] =
        (process_cpu_seconds() - cpu_before) * 1e9 / static_cast<double>(state.iterations());
}

// The floors a span's figure is read against, measured in the same run (registered by each program under its names):
// two reads of the span clock (the TSC where it is constant, common/clock.h: a kept span reads it twice), two
// steady_clock::now(), and one relaxed atomic load (a switched-off span's check).
inline void floor_two_span_clock_reads(benchmark::State& state) {
  set_up();  // decides the tick source, as a setup does
  for (auto _ : state) {
    benchmark::DoNotOptimize(internal::now_ticks());
    benchmark::DoNotOptimize(internal::now_ticks());
  }
}
inline void floor_two_steady_clock_reads(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  }
}
inline void floor_relaxed_atomic_load(benchmark::State& state) {
  static std::atomic<std::uint64_t> word{1};
  for (auto _ : state) benchmark::DoNotOptimize(word.load(std::memory_order_relaxed));
}

}  // namespace lens::bench
