// The settings every OTLP transport test starts from: telemetry on with every Megatron group, metrics off (the
// tests that want them turn them on), exports only when the test flushes or shuts down, and every signal sent
// over `protocol` to `endpoint` with a 2 s attempt timeout within a 4 s batch deadline.
#pragma once

#include <string>

#include "lens/config.h"
#include "lens/megatron.h"

namespace lens::testing {

inline Config otlp_test_config(OtlpProtocol protocol, const std::string& endpoint) {
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = "all";
  c.metrics_enabled = false;
  c.exporter = Exporter::kOtlp;
  c.run_id = "otlp-test";
  c.span_batch.schedule_delay_ms = 60000;
  c.span_batch.export_timeout_ms = 4000;
  for (OtlpSignalConfig* s : {&c.otlp_traces, &c.otlp_metrics, &c.otlp_logs}) {
    s->protocol = protocol;
    s->endpoint = endpoint;
    s->timeout_ms = 2000;
  }
  return c;
}

}  // namespace lens::testing
