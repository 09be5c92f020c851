// The Prometheus pull endpoint (OTEL_METRICS_EXPORTER=prometheus): GET /metrics in the Prometheus text format,
// named by the OpenTelemetry rules (unit suffixes, `_total` for monotonic sums, `_bucket/_sum/_count` for
// histograms), `target_info` for the resource, and `nemo_run_id` and `service_instance_id` on every series so
// `{nemo_run_id="ID", __name__=~"megatron_training_.*"}` selects one run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lens/config.h"
#include "metrics/metric_schedule.h"
#include "signals/exporter.h"

namespace lens::internal {

// `megatron.training.step_duration_ms` + `ms` -> `megatron_training_step_duration_ms_milliseconds`.
std::string prometheus_name(const MetricData& metric);

// The whole exposition text for one scrape.
std::string render_prometheus(const Resource& resource, const std::vector<MetricData>& metrics);

class PrometheusEndpoint {
 public:
  virtual ~PrometheusEndpoint() = default;
  virtual void stop() = 0;
  virtual int port() const = 0;
};

// Binds OTEL_EXPORTER_PROMETHEUS_HOST:PORT now (a port in use is a ConfigError here, not a crash later) and
// serves from a thread of its own: each scrape collects `metrics` and renders them with `resource` (both outlive
// the endpoint).
std::unique_ptr<PrometheusEndpoint> start_prometheus_endpoint(const Config& config, const Resource& resource,
                                                              MetricSchedule& metrics);

}  // namespace lens::internal
