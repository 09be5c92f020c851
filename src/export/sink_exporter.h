// A consumer's own exporters in place of the configured ones (SetupOptions::span_sink / metric_sink): each batch
// of a signal as one OTLP/JSON request, handed to a function on the pipeline's background thread. lens's Python
// package feeds OpenTelemetry SDK exporters this way, so the training thread never runs them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "signals/exporter.h"

namespace lens::internal {

using JsonSink = std::function<bool(const std::string& otlp_json)>;

// `inner` for the signals without a sink. A sink that returns false or throws is one failed export (counted);
// the next batch goes to it again.
std::unique_ptr<TelemetryExporter> make_sink_exporter(std::unique_ptr<TelemetryExporter> inner, JsonSink spans,
                                                      JsonSink metrics);

}  // namespace lens::internal
