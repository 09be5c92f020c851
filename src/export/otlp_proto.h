// OTLP protobuf encoding of the three export requests, written directly from lens's records by the walk of
// otlp_walk.h into a reused buffer: no libprotobuf, no per-span allocation. Field numbers are facts of the
// OpenTelemetry proto files; the bytes are checked by an independent decoder (protobufjs) in the tests.
#pragma once

#include <string>

#include "export/exporter.h"

namespace lens::internal {

// Replace `out` with the serialized ExportTraceServiceRequest / ExportMetricsServiceRequest /
// ExportLogsServiceRequest of the batch.
void encode_traces_proto(const ExportBatch& batch, std::string& out);
void encode_metrics_proto(const MetricsBatch& batch, std::string& out);
void encode_logs_proto(const LogsBatch& batch, std::string& out);

}  // namespace lens::internal
