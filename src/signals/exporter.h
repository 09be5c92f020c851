// What the three signals share on their way out, below both the code that records them (trace, logs, metrics)
// and the code that sends them (export): the exporter interface, its batches and results, the resource every
// batch carries, and the deadline an export must keep. The console, file, OTLP and test exporters implement it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "lens/telemetry.h"
#include "signals/log_record.h"
#include "signals/metric_data.h"

namespace lens::internal {

using Deadline = std::chrono::steady_clock::time_point;

enum class Signal { kTraces = 0, kMetrics = 1, kLogs = 2 };
using SignalSet = std::array<bool, 3>;  // indexed by Signal

// The resource every exported span carries (CONTRACT §5), in the order it was assembled.
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

// What became of one batch. A collector that accepts a batch may still reject some of its items (OTLP partial
// success): those are counted apart and never retried.
struct ExportResult {
  bool delivered = false;
  std::uint64_t rejected = 0;

  static const ExportResult kSuccess, kFailure;
  static ExportResult delivered_with(std::uint64_t rejected_items) { return {true, rejected_items}; }
  bool operator==(const ExportResult&) const = default;
};
inline constexpr ExportResult ExportResult::kSuccess{true, 0};
inline constexpr ExportResult ExportResult::kFailure{false, 0};

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

// Accepts every batch and keeps nothing: a rank that keeps only positions for hang snapshots exports nothing, and
// the benchmarks measure the training thread's cost without an encoder's.
class DiscardExporter final : public TelemetryExporter {
 public:
  ExportResult export_spans(const ExportBatch&, Deadline) override { return ExportResult::kSuccess; }
};

}  // namespace lens::internal
