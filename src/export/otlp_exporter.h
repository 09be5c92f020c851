// The OTLP exporter: each signal to its own destination over its own protocol (CONTRACT §7: the per-signal
// OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc), encoded once into a reused
// buffer on the background thread and sent by an OtlpChannel (HTTP or gRPC).
#pragma once

#include <memory>

#include "lens/config.h"
#include "signals/exporter.h"

namespace lens::internal {

// Throws ConfigError for settings it cannot serve: an unreadable TLS file; grpc in a build without gRPC (the
// message names http/protobuf).
std::unique_ptr<TelemetryExporter> make_otlp_exporter(const Config& config);

// Whether this build has OTLP/gRPC.
bool otlp_grpc_available();

}  // namespace lens::internal
