// OTLP over HTTP with libcurl: http/protobuf and http/json (OTLP exporter specification): endpoint rules, headers,
// timeout, gzip, TLS files, a User-Agent naming lens, one reused connection per signal. Which statuses are retried:
// 429, 502, 503, 504 and connection failures (Retry-After in seconds honoured); the rest of the retry rules are
// OtlpChannel's.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "export/otlp_channel.h"

namespace lens::internal {

// The URL a signal is sent to: a per-signal endpoint as-is; the general one + "/v1/<signal>"; else
// http://localhost:4318/v1/<signal>.
std::string otlp_http_url(const OtlpSignalConfig& settings, std::string_view path);

std::unique_ptr<OtlpChannel> make_otlp_http_channel(const OtlpSignalConfig& settings, const OtlpSignal& signal);

}  // namespace lens::internal
