#include "export/otlp_http.h"

#include <curl/curl.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/log.h"
#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#include "lens/version.h"

namespace lens::internal {

namespace {

using Clock = std::chrono::steady_clock;

std::string gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // +16: gzip framing
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Reads a varint at `at`; false at the end of the buffer.
bool read_varint(const std::string& b, std::size_t& at, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; at < b.size() && shift < 64; shift += 7) {
    auto c = static_cast<unsigned char>(b[at++]);
    v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

struct PartialSuccess {
  std::int64_t rejected = 0;
  std::string message;
};

// Export<Signal>ServiceResponse { partial_success = 1 { rejected_<items> = 1 (int64), error_message = 2 } }
PartialSuccess parse_partial_success_proto(const std::string& body) {
  PartialSuccess p;
  std::size_t at = 0;
  std::uint64_t key, len;
  while (read_varint(body, at, key)) {
    if ((key & 7) != 2) break;  // only length-delimited fields are expected here
    if (!read_varint(body, at, len) || at + len > body.size()) break;
    if ((key >> 3) == 1) {
      std::string inner = body.substr(at, len);
      std::size_t i = 0;
      std::uint64_t k, v;
      while (read_varint(inner, i, k)) {
        if ((k >> 3) == 1 && (k & 7) == 0 && read_varint(inner, i, v)) {
          p.rejected = static_cast<std::int64_t>(v);
        } else if ((k >> 3) == 2 && (k & 7) == 2 && read_varint(inner, i, v) && i + v <= inner.size()) {
          p.message = inner.substr(i, v);
          i += v;
        } else {
          break;
        }
      }
    }
    at += len;
  }
  return p;
}

// The JSON response: {"partialSuccess":{"rejectedSpans":"3","errorMessage":"..."}} (a small, lenient scan).
PartialSuccess parse_partial_success_json(const std::string& body) {
  PartialSuccess p;
  std::size_t rejected = body.find("\"rejected");
  if (rejected != std::string::npos) {
    std::size_t colon = body.find(':', rejected);
    if (colon != std::string::npos) {
      std::size_t digits = body.find_first_of("0123456789", colon);
      if (digits != std::string::npos) p.rejected = std::strtoll(body.c_str() + digits, nullptr, 10);
    }
  }
  std::size_t message = body.find("\"errorMessage\"");
  if (message != std::string::npos) {
    std::size_t open = body.find('"', body.find(':', message) + 1);
    std::size_t close = open == std::string::npos ? open : body.find('"', open + 1);
    if (close != std::string::npos) p.message = body.substr(open + 1, close - open - 1);
  }
  return p;
}

std::size_t collect_body(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

std::size_t collect_header(char* data, std::size_t size, std::size_t count, void* out) {
  std::string line(data, size * count);
  static const std::string kRetryAfter = "retry-after:";
  std::string lower;
  for (char c : line.substr(0, kRetryAfter.size())) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == kRetryAfter) *static_cast<long*>(out) = std::strtol(line.c_str() + kRetryAfter.size(), nullptr, 10);
  return size * count;
}

// One signal's destination: its settings and its reused connection.
class Channel {
 public:
  Channel(const OtlpSignalConfig& settings, std::string_view path, const char* what)
      : settings_(settings), url_(otlp_http_url(settings, path)), what_(what) {
    handle_ = curl_easy_init();
    std::string type = settings.protocol == OtlpProtocol::kHttpJson ? "application/json" : "application/x-protobuf";
    headers_ = curl_slist_append(headers_, ("Content-Type: " + type).c_str());
    if (settings.compression == Compression::kGzip) headers_ = curl_slist_append(headers_, "Content-Encoding: gzip");
    for (const auto& [k, v] : settings.headers) headers_ = curl_slist_append(headers_, (k + ": " + v).c_str());
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
  }
  ~Channel() {
    curl_slist_free_all(headers_);
    if (handle_) curl_easy_cleanup(handle_);
  }
  bool json() const { return settings_.protocol == OtlpProtocol::kHttpJson; }

  ExportResult send(const std::string& payload, std::size_t items, Deadline deadline) {
    const std::string body = settings_.compression == Compression::kGzip ? gzip(payload) : payload;
    auto backoff = std::chrono::milliseconds(200);
    static thread_local std::mt19937 jitter{std::random_device{}()};
    for (int attempt = 1;; ++attempt) {
      auto now = Clock::now();
      auto timeout = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                              std::chrono::milliseconds(settings_.timeout_ms));
      if (timeout.count() <= 0) {
        log_warning("OTLP %s export to %s gave up: the deadline passed", what_, url_.c_str());
        return ExportResult::kFailure;
      }
      long status = 0, retry_after = -1;
      CURLcode code = perform(body, timeout, status, retry_after);
      if (code == CURLE_OK && status >= 200 && status < 300) {
        report_partial_success(items);
        return ExportResult::kSuccess;
      }
      bool retryable = code != CURLE_OK ? transport_retryable(code)
                                        : (status == 429 || status == 502 || status == 503 || status == 504);
      if (!retryable) {
        if (code != CURLE_OK)
          log_warning("OTLP %s export to %s failed: %s", what_, url_.c_str(), curl_easy_strerror(code));
        else
          log_warning("OTLP %s export to %s was refused with HTTP %ld (not retried)", what_, url_.c_str(), status);
        return ExportResult::kFailure;
      }
      // Exponential back-off with jitter; the server's Retry-After when it gives one; never past the deadline.
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          backoff * std::uniform_real_distribution<double>(0.8, 1.2)(jitter));
      if (retry_after >= 0) wait = std::chrono::seconds(retry_after);
      if (Clock::now() + wait >= deadline) {
        log_warning("OTLP %s export to %s failed after %d attempts (%s); the batch is dropped", what_, url_.c_str(),
                    attempt, code != CURLE_OK ? curl_easy_strerror(code) : ("HTTP " + std::to_string(status)).c_str());
        return ExportResult::kFailure;
      }
      std::this_thread::sleep_for(wait);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    }
  }

 private:
  static bool transport_retryable(CURLcode code) {
    return code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT || code == CURLE_GOT_NOTHING ||
           code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR || code == CURLE_COULDNT_RESOLVE_HOST;
  }

  CURLcode perform(const std::string& body, std::chrono::milliseconds timeout, long& status, long& retry_after) {
    response_.clear();
    curl_easy_setopt(handle_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(handle_, CURLOPT_POST, 1L);
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(handle_, CURLOPT_USERAGENT, "lens/" LENS_VERSION_STRING " (OTLP exporter; C++)");
    curl_easy_setopt(handle_, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(handle_, CURLOPT_WRITEDATA, &response_);
    curl_easy_setopt(handle_, CURLOPT_HEADERFUNCTION, collect_header);
    curl_easy_setopt(handle_, CURLOPT_HEADERDATA, &retry_after);
    if (!settings_.certificate.empty()) curl_easy_setopt(handle_, CURLOPT_CAINFO, settings_.certificate.c_str());
    if (!settings_.client_certificate.empty())
      curl_easy_setopt(handle_, CURLOPT_SSLCERT, settings_.client_certificate.c_str());
    if (!settings_.client_key.empty()) curl_easy_setopt(handle_, CURLOPT_SSLKEY, settings_.client_key.c_str());
    CURLcode code = curl_easy_perform(handle_);
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &status);
    return code;
  }

  void report_partial_success(std::size_t) {
    if (response_.empty()) return;
    PartialSuccess p = json() ? parse_partial_success_json(response_) : parse_partial_success_proto(response_);
    if (p.rejected == 0 && p.message.empty()) return;
    rejected_ += p.rejected;
    // Logged once per distinct message; never retried.
    if (logged_messages_.insert(p.message).second)
      log_warning("OTLP %s export to %s: the collector rejected %lld items: %s", what_, url_.c_str(),
                  static_cast<long long>(p.rejected), p.message.c_str());
  }

  OtlpSignalConfig settings_;
  std::string url_;
  const char* what_;
  CURL* handle_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::string response_;
  std::set<std::string> logged_messages_;

 public:
  std::int64_t rejected_ = 0;
};

class OtlpHttpExporter final : public TelemetryExporter {
 public:
  explicit OtlpHttpExporter(const Config& c)
      : traces_(c.otlp_traces, "v1/traces", "traces"),
        metrics_(c.otlp_metrics, "v1/metrics", "metrics"),
        logs_(c.otlp_logs, "v1/logs", "logs") {}

  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    traces_.json() ? (buffer_.clear(), encode_traces_json(batch, buffer_)) : encode_traces_proto(batch, buffer_);
    return traces_.send(buffer_, batch.spans.size(), deadline);
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    metrics_.json() ? (buffer_.clear(), encode_metrics_json(batch, buffer_)) : encode_metrics_proto(batch, buffer_);
    return metrics_.send(buffer_, batch.metrics.size(), deadline);
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    logs_.json() ? (buffer_.clear(), encode_logs_json(batch, buffer_)) : encode_logs_proto(batch, buffer_);
    return logs_.send(buffer_, batch.logs.size(), deadline);
  }

 private:
  Channel traces_, metrics_, logs_;
  std::string buffer_;
};

}  // namespace

std::string otlp_http_url(const OtlpSignalConfig& signal, std::string_view path) {
  if (signal.endpoint_is_per_signal) return signal.endpoint;
  std::string base = signal.endpoint.empty() ? "http://localhost:4318" : signal.endpoint;
  if (!base.empty() && base.back() != '/') base += '/';
  return base + std::string(path);
}

std::unique_ptr<TelemetryExporter> make_otlp_http_exporter(const Config& config) {
  for (const OtlpSignalConfig* s : {&config.otlp_traces, &config.otlp_metrics, &config.otlp_logs}) {
    if (s->protocol == OtlpProtocol::kGrpc) {
      throw ConfigError(
          "lens: the OTLP protocol grpc is not in this build (OTEL_EXPORTER_OTLP_PROTOCOL or "
          "OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL, default grpc); set it to http/protobuf (or http/json)");
    }
  }
  static std::once_flag curl_ready;
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::make_unique<OtlpHttpExporter>(config);
}

}  // namespace lens::internal
