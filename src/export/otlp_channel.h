// What OTLP/HTTP and OTLP/gRPC share (OTLP exporter specification): one signal's destination, sending a
// pre-encoded request with retries (exponential back-off with jitter, the server's retry hint honoured, never past
// the deadline), the collector's partial-success answer (logged once per distinct message, its rejected items
// counted, never retried), and failures logged at a bounded rate per channel. A transport only says what one attempt
// did.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "lens/config.h"
#include "signals/exporter.h"

namespace lens::internal {

// One OTLP signal's fixed names.
struct OtlpSignal {
  const char* name;         // "traces": for messages
  const char* http_path;    // "v1/traces": appended to a general endpoint
  const char* grpc_method;  // "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
};
extern const OtlpSignal kOtlpTraces, kOtlpMetrics, kOtlpLogs;

// Export<Signal>ServiceResponse.partial_success.
struct PartialSuccess {
  std::int64_t rejected = 0;
  std::string message;
};
PartialSuccess parse_partial_success_proto(std::string_view response);
PartialSuccess parse_partial_success_json(std::string_view response);

// A google.rpc.Status error body: its message, and the delay of a google.rpc.RetryInfo among its details.
struct RpcStatus {
  std::string message;
  std::optional<std::chrono::milliseconds> retry_delay;
};
RpcStatus parse_rpc_status_proto(std::string_view body);
std::string parse_rpc_status_message_json(std::string_view body);

// What one attempt did.
struct Attempt {
  enum class Outcome { kDelivered, kRetryable, kRefused };
  Outcome outcome = Outcome::kRefused;
  std::string error;  // why it failed, for the log ("HTTP 503: overloaded", "UNAVAILABLE: connection refused")
  std::optional<std::chrono::milliseconds> retry_after;  // the server's hint
  PartialSuccess partial;                                // when delivered
};

// A collector's retry hint (HTTP Retry-After seconds, gRPC RetryInfo), bounded: at least kMinRetryHint (a hint of
// 0 must not turn lens into a flood) and at most kMaxRetryHint (a huge hint must not overflow the delay arithmetic
// or park the export thread for years; past the batch's deadline the batch is dropped and counted anyway).
inline constexpr std::chrono::milliseconds kMinRetryHint{100};
inline constexpr std::chrono::milliseconds kMaxRetryHint{std::chrono::hours(1)};
std::chrono::milliseconds bounded_retry_hint(std::uint64_t seconds, std::uint64_t nanos = 0);

// Refuses, at setup, OTLP headers that the transport cannot carry as they are: a key that is not an HTTP token
// (gRPC: not [0-9a-z_.-] once lowercased), a value with CR, LF, NUL or another control byte (gRPC: outside
// printable ASCII, unless the key ends in -bin). Such a header would be injected into the HTTP request or make
// gRPC abort the process. Throws ConfigError naming the variable and the entry, never the value.
void check_otlp_headers(const OtlpSignalConfig& settings, const OtlpSignal& signal);

// Reads a TLS file named by OTEL_EXPORTER_OTLP_[<SIGNAL>_]<variable> (CERTIFICATE, CLIENT_KEY,
// CLIENT_CERTIFICATE); throws ConfigError naming the file and the variable when it cannot be read.
std::string read_tls_file(const std::string& path, const char* variable);

class OtlpChannel {
 public:
  OtlpChannel(const OtlpSignalConfig& settings, const OtlpSignal& signal, const std::string& destination);
  virtual ~OtlpChannel() = default;
  OtlpChannel(const OtlpChannel&) = delete;
  OtlpChannel& operator=(const OtlpChannel&) = delete;

  // Sends one encoded request of `items` items; retries what may be retried until `deadline`.
  ExportResult send(std::string_view payload, std::size_t items, Deadline deadline);
  bool json() const { return settings_.protocol == OtlpProtocol::kHttpJson; }
  const std::string& destination() const { return destination_; }
  // Ends the connection (from the background thread, at shutdown).
  virtual void close() {}

 protected:
  // One try, within `timeout`.
  virtual Attempt attempt(std::string_view payload, std::chrono::milliseconds timeout) = 0;
  const OtlpSignalConfig settings_;
  const OtlpSignal& signal_;

 private:
  std::uint64_t take_partial_success(const PartialSuccess& partial, std::size_t items);

  std::string destination_;  // for messages: URL or gRPC target, never a header
  std::set<std::string> logged_partial_messages_;
};

}  // namespace lens::internal
