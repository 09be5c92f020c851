// The exporter interface: what the pipeline's background thread hands batches of spans, metrics and log
// records to. console and file (OTLP/JSON) implement it here, OTLP over HTTP and gRPC later; tests use
// MemoryExporter.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lens/telemetry.h"
#include "logs/log_record.h"
#include "metrics/instruments.h"
#include "trace/clock.h"

namespace lens::internal {

using Deadline = std::chrono::steady_clock::time_point;

// The resource every exported span carries (SPEC §5), in the order it was assembled.
struct Resource {
  ResourceAttributes attributes;
};

struct ExportBatch {
  const Resource& resource;
  const std::vector<const std::uint8_t*>& spans;  // records, read with SpanView
  const TimeMap& time;                            // ticks to Unix nanoseconds
};

struct MetricsBatch {
  const Resource& resource;
  const std::vector<MetricData>& metrics;
};

struct LogsBatch {
  const Resource& resource;
  const std::vector<LogRecordData>& logs;
};

enum class ExportResult { kSuccess, kFailure };

class TelemetryExporter {
 public:
  virtual ~TelemetryExporter() = default;
  // Exports one batch; must give up by `deadline`. Runs on the pipeline's background thread only.
  virtual ExportResult export_spans(const ExportBatch& batch, Deadline deadline) = 0;
  virtual ExportResult export_metrics(const MetricsBatch&, Deadline) { return ExportResult::kSuccess; }
  virtual ExportResult export_logs(const LogsBatch&, Deadline) { return ExportResult::kSuccess; }
  // Ends the exporter (close files, connections). Called once, from the background thread.
  virtual void shutdown() {}
};

}  // namespace lens::internal
