// OTLP/JSON encoding of an ExportTraceServiceRequest, as the OTLP specification's JSON rules say: trace and
// span ids as lower-case hex, 64-bit integers as decimal strings, enums as integers, lowerCamelCase keys.
#pragma once

#include <string>

#include "signals/exporter.h"

namespace lens::internal {

// Append one compact request (no newline) for the batch to `out`: ExportTraceServiceRequest,
// ExportMetricsServiceRequest, ExportLogsServiceRequest.
void encode_traces_json(const ExportBatch& batch, std::string& out);
void encode_metrics_json(const MetricsBatch& batch, std::string& out);
void encode_logs_json(const LogsBatch& batch, std::string& out);

}  // namespace lens::internal
