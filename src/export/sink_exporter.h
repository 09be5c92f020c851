// A consumer's own exporters in place of the configured ones (SetupOptions::span_sink, span_batch_sink,
// metric_sink): each batch of a signal handed to a function on the pipeline's background thread, spans as the batch
// itself (lens/internal/span_batch.h reads it) or as OTLP/JSON, metrics as OTLP/JSON. lens's Python package feeds
// OpenTelemetry SDK exporters this way, so the training thread never runs them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "signals/exporter.h"

namespace lens::internal {

using JsonSink = std::function<bool(const std::string& otlp_json)>;
using SpanBatchSink = std::function<bool(const ExportBatch& batch)>;

// A span sink of OTLP/JSON requests (SetupOptions::span_sink) as a batch sink: each batch encoded, then handed over.
SpanBatchSink span_json_sink(JsonSink json);

// `inner` for the signals without a sink. A sink that returns false or throws is one failed export (counted);
// the next batch goes to it again.
std::unique_ptr<TelemetryExporter> make_sink_exporter(std::unique_ptr<TelemetryExporter> inner, SpanBatchSink spans,
                                                      JsonSink metrics);

}  // namespace lens::internal
