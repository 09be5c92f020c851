// OTLP over HTTP with libcurl: http/protobuf and http/json, for traces, metrics and logs (OTLP exporter
// specification): endpoint rules, headers, timeout, gzip, TLS files, User-Agent, one reused connection per
// signal, and retries (429, 502, 503, 504 and connection failures; exponential back-off with jitter;
// Retry-After honoured; never past the deadline; never after a partial success).
#pragma once

#include <memory>
#include <string>

#include "export/exporter.h"
#include "lens/config.h"

namespace lens::internal {

// The URL a signal is sent to: a per-signal endpoint as-is; the general one + "/v1/<signal>"; else
// http://localhost:4318/v1/<signal>.
std::string otlp_http_url(const OtlpSignalConfig& signal, std::string_view path);

// Throws ConfigError for settings it cannot serve (the grpc protocol in this build: it names http/protobuf).
std::unique_ptr<TelemetryExporter> make_otlp_http_exporter(const Config& config);

}  // namespace lens::internal
