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

// Binds OTEL_EXPORTER_PROMETHEUS_HOST:`port` now (a port in use is a ConfigError here, not a crash later) and
// serves from a thread of its own: each scrape collects `metrics` and renders them with `resource` (both outlive
// the endpoint).
std::unique_ptr<PrometheusEndpoint> start_prometheus_endpoint(const Config& config, int port, const Resource& resource,
                                                              MetricSchedule& metrics);

// A rank's port: OTEL_EXPORTER_PROMETHEUS_PORT + its local rank, so that the ranks of one host do not all ask for
// one port (as multi-process exporters do). 0 when that is past 65535.
int prometheus_port_of(const Config& config, int local_rank);

// Where Prometheus finds a rank's endpoint: a file_sd_configs target group, as a JSON list of one,
//   [{"targets": ["node7:9467"], "labels": {"nemo_run_id": "...", "dl_rank": "3", "dl_local_rank": "3"}}]
// written to <FILE_DIR>/prometheus/<run id>.rank<R>.json while the endpoint serves (a Prometheus file_sd_configs
// entry `files: [<FILE_DIR>/prometheus/*.json]` finds every rank of every run there). The host is the bound one, or
// this host's name when it is bound to every address.
std::string prometheus_target_json(const Config& config, int port, const std::string& run_id, int rank, int local_rank);

}  // namespace lens::internal
