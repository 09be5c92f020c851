// The settings every OTLP transport test starts from: telemetry on with every Megatron group, metrics off (the
// tests that want them turn them on), exports only when the test flushes or shuts down, and every signal sent
// over `protocol` to `endpoint` with a 2 s attempt timeout within a 4 s batch deadline.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "lens/config.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"

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

// Sets telemetry up with `config`, exports one span ("first") with a flush and another ("second") with the
// shutdown, and returns the shut-down handle for its counts: how a retry test sees that trouble with the first
// batch does not hold the second. Expects the shutdown to succeed within 4 s.
inline Telemetry export_two_batches(const Config& config) {
  Telemetry t = setup_telemetry(config, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(megatron::group::job, "first"); }
  t.force_flush(std::chrono::seconds(5));
  { LENS_SPAN(megatron::group::job, "second"); }
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(t.shutdown(std::chrono::seconds(5)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  return t;
}

}  // namespace lens::testing
