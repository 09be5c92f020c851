// What one setup decided, shared by its handles and the hooks (atexit, SIGTERM, fork).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>

#include "control/control.h"
#include "export/prometheus.h"
#include "export/sink_exporter.h"
#include "lens/telemetry.h"
#include "signals/exporter.h"
#include "telemetry/pipeline.h"

namespace lens::internal {

struct TelemetryState {
  Config config;
  RankInfo ranks;
  bool exporting = false;
  bool exports_step_roots = false;  // the lowest exporting rank: it exports the step layout's roots (CONTRACT §6)
  GroupSet resolved_span_groups;
  GroupSet device_span_groups;  // timed on the device with DEVICE_TIMING=cuda
  std::string run_id;
  Resource resource;
  ResourceAttributes resource_attributes;
  SpanBatchSink span_sink;  // SetupOptions' own exporters, if any (a JSON span sink as a batch sink)
  JsonSink metric_sink;
  Pipeline* pipeline = nullptr;  // exporting ranks with any signal on, or positions for hang snapshots; never freed
  std::unique_ptr<PrometheusEndpoint> prometheus;  // OTEL_METRICS_EXPORTER=prometheus
  std::string prometheus_target_path;              // its file_sd target file, removed when it stops
  std::unique_ptr<ControlEndpoint> control;        // P_CONTROL on an exporting rank 0
  pid_t pid = 0;                                   // the process that set up: in a forked child the state is inert
  std::atomic<bool> shut_down{false};

  bool inert() const noexcept;  // shut down, or inherited across fork
};

// Installs, once per process, the atexit flush and the SIGTERM handler (chaining to the previous one).
void install_process_hooks();

// Installs, once per signal, P_HANG_SIGNAL's handler: it asks the live pipeline for a hang snapshot (chaining to
// the application's handler, if it had one). 0: none.
void install_hang_signal(int signal);

// Shuts the live setup down (the atexit hook).
void shutdown_live_setup() noexcept;

}  // namespace lens::internal
