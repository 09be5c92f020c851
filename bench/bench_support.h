// Telemetry for the benchmarks of one program: one setup shared by all of them, with an exporter that
// drops batches on arrival, so the figures are the training thread's cost, not the encoder's.
#pragma once

#include <memory>

#include "export/exporter.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"
#include "telemetry/setup_internal.h"

namespace lens::bench {

class DiscardExporter final : public internal::SpanExporter {
 public:
  internal::ExportResult export_spans(const internal::ExportBatch&, internal::Deadline) override {
    return internal::ExportResult::kSuccess;
  }
};

// Every group of `per_step` and `microbatch` on (so `step` is on and `layer` is off); the sampler as asked.
inline void set_up(TracesSampler sampler = TracesSampler::kParentBasedAlwaysOn) {
  static bool ready = false;
  static TracesSampler current;
  static Telemetry telemetry;
  if (ready && current == sampler) return;
  Config config;
  config.catalogue = megatron::catalogue();
  config.enabled = true;
  config.span_groups = "per_step,microbatch";
  config.traces_sampler = sampler;
  telemetry = internal::setup(config, 0, 1, {}, SetupOptions{.reinit = true}, std::make_unique<DiscardExporter>());
  current = sampler;
  ready = true;
}

}  // namespace lens::bench
