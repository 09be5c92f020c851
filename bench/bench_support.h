// Telemetry for the benchmarks of one program: one setup shared by all of them, with an exporter that
// drops batches on arrival, so the figures are the training thread's cost, not the encoder's.
#pragma once

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

}  // namespace lens::bench
