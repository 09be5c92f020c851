// The exporter interface: what the pipeline's background thread hands a batch of ended spans to. console and
// file (OTLP/JSON) implement it here, OTLP over HTTP and gRPC later; tests use MemoryExporter.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lens/telemetry.h"
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

enum class ExportResult { kSuccess, kFailure };

class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  // Exports one batch; must give up by `deadline`. Runs on the pipeline's background thread only.
  virtual ExportResult export_spans(const ExportBatch& batch, Deadline deadline) = 0;
  // Ends the exporter (close files, connections). Called once, from the background thread.
  virtual void shutdown() {}
};

}  // namespace lens::internal
