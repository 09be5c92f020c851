// Telemetry for the benchmarks of one program: one setup shared by all of them, with an exporter that
// drops batches on arrival, so the figures are the training thread's cost, not the encoder's.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>

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

// Runs `body` once an iteration. kept: in bursts of kBurst with an untimed flush between them, so every span is kept
// and the figure is what a user pays; else a tight loop, where the producer may outrun the export thread and part of
// the figure is the drop path. Sets the `drop_ratio` counter either way.
inline constexpr std::int64_t kBurst = 1000;
// Never inlined: callgrind counts a span's instructions inside it (--toggle-collect='*spans_in_bursts*').
template <typename Body>
__attribute__((noinline)) void spans_in_bursts(benchmark::State& state, Telemetry& t, bool kept, Body body) {
  t.force_flush();
  const SpanStats before = t.span_stats();
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
  const SpanStats after = t.span_stats();
  const double produced = static_cast<double>(after.produced - before.produced);
  state.counters["drop_ratio"] = produced > 0 ? static_cast<double>(after.dropped() - before.dropped()) / produced : 0;
}

}  // namespace lens::bench
