#include "export/otlp_channel.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/text.h"

namespace lens::internal {

const OtlpSignal kOtlpTraces{"traces", "v1/traces", "/opentelemetry.proto.collector.trace.v1.TraceService/Export"};
const OtlpSignal kOtlpMetrics{"metrics", "v1/metrics",
                              "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"};
const OtlpSignal kOtlpLogs{"logs", "v1/logs", "/opentelemetry.proto.collector.logs.v1.LogsService/Export"};

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The fields of one protobuf message, in order; stops at the end or at anything malformed.
class ProtoFields {
 public:
  explicit ProtoFields(std::string_view message) : rest_(message) {}

  bool next() {
    std::uint64_t key;
    if (!read_varint(key)) return false;
    number_ = static_cast<std::uint32_t>(key >> 3);
    switch (key & 7) {
      case 0: return read_varint(varint_);
      case 1: return skip(8);
      case 5: return skip(4);
      case 2: {
        std::uint64_t length;
        if (!read_varint(length) || length > rest_.size()) return false;
        bytes_ = rest_.substr(0, length);
        rest_.remove_prefix(length);
        return true;
      }
      default: return false;
    }
  }
  std::uint32_t number() const { return number_; }
  std::uint64_t varint() const { return varint_; }
  std::string_view bytes() const { return bytes_; }

 private:
  bool read_varint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; !rest_.empty() && shift < 64; shift += 7) {
      auto c = static_cast<unsigned char>(rest_.front());
      rest_.remove_prefix(1);
      value |= static_cast<std::uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  }
  bool skip(std::size_t n) {
    if (rest_.size() < n) return false;
    rest_.remove_prefix(n);
    return true;
  }

  std::string_view rest_, bytes_;
  std::uint32_t number_ = 0;
  std::uint64_t varint_ = 0;
};

// The string value of the first `"key":"..."` in a JSON text (a lenient scan for a small, known answer).
std::string json_string_after(std::string_view body, std::string_view key) {
  std::size_t at = body.find(key);
  if (at == std::string_view::npos) return {};
  std::size_t colon = body.find(':', at + key.size());
  std::size_t open = colon == std::string_view::npos ? colon : body.find('"', colon + 1);
  if (open == std::string_view::npos) return {};
  std::string out;
  for (std::size_t i = open + 1; i < body.size() && body[i] != '"'; ++i) {
    if (body[i] == '\\' && i + 1 < body.size()) ++i;
    out += body[i];
  }
  return out;
}

}  // namespace

// Export<Signal>ServiceResponse { partial_success = 1 { rejected_<items> = 1 (int64), error_message = 2 } }
PartialSuccess parse_partial_success_proto(std::string_view response) {
  PartialSuccess p;
  for (ProtoFields outer(response); outer.next();) {
    if (outer.number() != 1) continue;
    for (ProtoFields inner(outer.bytes()); inner.next();) {
      if (inner.number() == 1) p.rejected = static_cast<std::int64_t>(inner.varint());
      if (inner.number() == 2) p.message = std::string(inner.bytes());
    }
  }
  return p;
}

// {"partialSuccess":{"rejectedSpans":"3","errorMessage":"..."}}; int64 may be a string or a number. A sign is
// kept, so that a negative count is seen as one (and not counted).
PartialSuccess parse_partial_success_json(std::string_view response) {
  PartialSuccess p;
  std::size_t rejected = response.find("\"rejected");
  if (rejected != std::string_view::npos) {
    std::size_t number = response.find_first_of("-0123456789", response.find(':', rejected));
    if (number != std::string_view::npos) p.rejected = std::strtoll(response.data() + number, nullptr, 10);
  }
  p.message = json_string_after(response, "\"errorMessage\"");
  return p;
}

// google.rpc.Status { code = 1, message = 2, details = 3 (repeated google.protobuf.Any { type_url = 1, value = 2 }) }
// google.rpc.RetryInfo { retry_delay = 1 (google.protobuf.Duration { seconds = 1, nanos = 2 }) }
RpcStatus parse_rpc_status_proto(std::string_view body) {
  RpcStatus status;
  for (ProtoFields field(body); field.next();) {
    if (field.number() == 2) status.message = std::string(field.bytes());
    if (field.number() != 3) continue;
    std::string_view type, value;
    for (ProtoFields any(field.bytes()); any.next();) {
      if (any.number() == 1) type = any.bytes();
      if (any.number() == 2) value = any.bytes();
    }
    if (!type.ends_with("google.rpc.RetryInfo")) continue;
    std::uint64_t seconds = 0, nanos = 0;
    for (ProtoFields info(value); info.next();) {
      if (info.number() != 1) continue;
      for (ProtoFields duration(info.bytes()); duration.next();) {
        if (duration.number() == 1) seconds = duration.varint();
        if (duration.number() == 2) nanos = duration.varint();
      }
    }
    // Duration.seconds is an int64: a negative one arrives as a huge varint and is read as "no wait" (the floor).
    if (seconds >> 63) seconds = nanos = 0;
    status.retry_delay = bounded_retry_hint(seconds, nanos);
  }
  return status;
}

std::string parse_rpc_status_message_json(std::string_view body) { return json_string_after(body, "\"message\""); }

milliseconds bounded_retry_hint(std::uint64_t seconds, std::uint64_t nanos) {
  constexpr auto kMaxSeconds =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(kMaxRetryHint).count());
  if (seconds >= kMaxSeconds) return kMaxRetryHint;
  milliseconds hint(seconds * 1000 + std::min<std::uint64_t>(nanos, 999999999) / 1000000);
  return std::clamp(hint, kMinRetryHint, kMaxRetryHint);
}

namespace {

bool http_token_char(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

const char* header_problem(std::string_view key, std::string_view value, bool grpc) {
  if (key.empty()) return "has an empty key";
  for (char k : key) {
    auto c = static_cast<unsigned char>(k);
    bool allowed = grpc ? std::isalnum(c) || c == '_' || c == '.' || c == '-' : http_token_char(c);
    if (!allowed) {
      return grpc ? "has a key that gRPC metadata cannot carry (letters, digits, '_', '.', '-' only)"
                  : "has a key that is not an HTTP header name (no spaces, ':' or control characters)";
    }
  }
  const std::string lower = to_lower(key);
  if (grpc && lower.starts_with("grpc-")) return "has a key with the prefix 'grpc-', which gRPC reserves";
  // HTTP/2's connection-specific fields (RFC 9113 §8.2.2): a request carrying one is malformed, and gRPC sets te.
  for (std::string_view connection_specific :
       {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}) {
    if (grpc && lower == connection_specific)
      return "has a connection-specific key (connection, keep-alive, proxy-connection, transfer-encoding, upgrade, "
             "te) that HTTP/2 cannot carry";
  }
  if (grpc && lower.ends_with("-bin")) return nullptr;  // binary metadata carries any bytes
  for (char v : value) {
    auto c = static_cast<unsigned char>(v);
    if (grpc ? (c < 0x20 || c > 0x7e) : ((c < 0x20 && c != '\t') || c == 0x7f)) {
      return grpc ? "has a value that gRPC metadata cannot carry (printable ASCII only; CR, LF, NUL are refused)"
                  : "has a value with a control character (CR, LF, NUL, ...), which would split the request";
    }
  }
  return nullptr;
}

}  // namespace

void check_otlp_headers(const OtlpSignalConfig& settings, const OtlpSignal& signal) {
  bool grpc = settings.protocol == OtlpProtocol::kGrpc;
  std::size_t position = 0;
  for (const auto& [key, value] : settings.headers) {
    ++position;
    if (const char* problem = header_problem(key, value, grpc)) {
      throw ConfigError("lens: OTEL_EXPORTER_OTLP_HEADERS (or OTEL_EXPORTER_OTLP_" + to_upper(signal.name) +
                        "_HEADERS) is invalid: entry " + std::to_string(position) + " " + problem +
                        " (header values are never shown)");
    }
  }
}

std::string read_tls_file(const std::string& path, const char* variable) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError("lens: cannot read " + path + ", the file OTEL_EXPORTER_OTLP_[<SIGNAL>_]" + variable +
                      " names: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

OtlpChannel::OtlpChannel(const OtlpSignalConfig& settings, const OtlpSignal& signal, const std::string& destination)
    : settings_(settings), signal_(signal), destination_(redact_url(destination)) {
  check_otlp_headers(settings_, signal_);
  // Read the TLS files now: a wrong path is a setup error, not a warning per batch.
  if (!settings_.certificate.empty()) read_tls_file(settings_.certificate, "CERTIFICATE");
  if (!settings_.client_key.empty()) read_tls_file(settings_.client_key, "CLIENT_KEY");
  if (!settings_.client_certificate.empty()) read_tls_file(settings_.client_certificate, "CLIENT_CERTIFICATE");
}

ExportResult OtlpChannel::send(std::string_view payload, std::size_t items, Deadline deadline) {
  // A small generator: jitter needs no quality, and thread-local storage must stay small (liblens.so is loaded
  // by dlopen from Python, where an initial-exec TLS block has to fit glibc's small static surplus).
  static thread_local std::minstd_rand jitter{std::random_device{}()};
  milliseconds backoff(200);
  for (int tries = 1;; ++tries) {
    auto timeout = std::min(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()),
                            milliseconds(std::clamp<std::int64_t>(settings_.timeout_ms, 0, kMaxDurationMs)));
    if (timeout.count() <= 0) {
      log_warning_from(this, "OTLP %s export to %s gave up: the deadline passed; the batch is dropped", signal_.name,
                       destination_.c_str());
      return ExportResult::kFailure;
    }
    Attempt a = attempt(payload, timeout);
    if (a.outcome == Attempt::Outcome::kDelivered)
      return ExportResult::delivered_with(take_partial_success(a.partial, items));
    if (a.outcome == Attempt::Outcome::kRefused) {
      log_warning_from(this, "OTLP %s export to %s was refused (%s); not retried, the batch is dropped", signal_.name,
                       destination_.c_str(), a.error.c_str());
      return ExportResult::kFailure;
    }
    // Exponential back-off with jitter, or the server's hint; never past the deadline.
    auto wait = a.retry_after.value_or(
        std::chrono::duration_cast<milliseconds>(backoff * std::uniform_real_distribution<double>(0.8, 1.2)(jitter)));
    if (wait >= deadline - Clock::now()) {  // a difference of durations: no overflow whatever the hint
      log_warning_from(this, "OTLP %s export to %s failed after %d attempt(s), the last: %s; the batch is dropped",
                       signal_.name, destination_.c_str(), tries, a.error.c_str());
      return ExportResult::kFailure;
    }
    std::this_thread::sleep_for(wait);
    backoff = std::min(backoff * 2, milliseconds(5000));
  }
}

std::uint64_t OtlpChannel::take_partial_success(const PartialSuccess& partial, std::size_t items) {
  if (partial.rejected == 0 && partial.message.empty()) return 0;
  // Logged once per distinct message (a collector repeats the same reason for every batch); never retried. The
  // message's own entry is the source, so distinct messages do not share a rate limit.
  if (logged_partial_messages_.size() < 64) {
    auto [entry, inserted] = logged_partial_messages_.insert(partial.message);
    if (inserted) {
      log_warning_from(&*entry, "OTLP %s export to %s: the collector rejected %lld of %zu items%s: %s", signal_.name,
                       destination_.c_str(), static_cast<long long>(partial.rejected), items,
                       partial.rejected < 0 ? " (a negative count: none counted as rejected)" : "",
                       partial.message.empty() ? "(no message)" : printable_excerpt(partial.message).c_str());
    }
  }
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(partial.rejected, 0, static_cast<std::int64_t>(items)));
}

}  // namespace lens::internal
