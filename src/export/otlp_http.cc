#include "export/otlp_http.h"

#include <curl/curl.h>
#include <strings.h>
#include <zlib.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include "common/text.h"
#include "lens/version.h"

namespace lens::internal {

namespace {

std::string gzip(std::string_view data) {
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

// An OTLP response is a few bytes; a collector that answers with more is not read further (the transfer ends,
// the status line still decides), so an endless body cannot grow a rank's memory.
constexpr std::size_t kMaxResponseBody = std::size_t{64} << 10;

struct Response {
  std::string body;
  bool cut = false;  // the body was longer than kMaxResponseBody
};

std::size_t collect_body(char* data, std::size_t size, std::size_t count, void* out) {
  auto& response = *static_cast<Response*>(out);
  if (response.body.size() + size * count > kMaxResponseBody) {
    response.cut = true;
    return 0;  // ends the transfer with CURLE_WRITE_ERROR
  }
  response.body.append(data, size * count);
  return size * count;
}

// Retry-After in seconds, bounded (bounded_retry_hint); a number too large to read is the largest hint. The
// HTTP-date form is not used by collectors and is ignored: back-off applies.
std::size_t collect_retry_after(char* data, std::size_t size, std::size_t count, void* out) {
  std::string_view line(data, size * count);
  static constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size() && strncasecmp(line.data(), kName.data(), kName.size()) == 0) {
    std::string_view value = trim(line.substr(kName.size()));
    if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) return size * count;
    std::uint64_t seconds = UINT64_MAX;  // stays so when the digits overflow
    (void)std::from_chars(value.data(), value.data() + value.size(), seconds);
    *static_cast<std::optional<std::chrono::milliseconds>*>(out) = bounded_retry_hint(seconds);
  }
  return size * count;
}

bool retryable_status(long status) { return status == 429 || status == 502 || status == 503 || status == 504; }

bool retryable_transport_error(CURLcode code) {
  return code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT || code == CURLE_GOT_NOTHING ||
         code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR || code == CURLE_COULDNT_RESOLVE_HOST ||
         code == CURLE_PARTIAL_FILE;
}

class HttpChannel final : public OtlpChannel {
 public:
  HttpChannel(const OtlpSignalConfig& settings, const OtlpSignal& signal)
      : OtlpChannel(settings, signal, otlp_http_url(settings, signal.http_path)), handle_(curl_easy_init()) {
    std::string type = json() ? "application/json" : "application/x-protobuf";
    headers_ = curl_slist_append(headers_, ("Content-Type: " + type).c_str());
    if (settings.compression == Compression::kGzip) headers_ = curl_slist_append(headers_, "Content-Encoding: gzip");
    for (const auto& [k, v] : settings.headers) {
      std::string line = k;
      line.append(": ").append(v);
      headers_ = curl_slist_append(headers_, line.c_str());
    }
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    configure();
  }
  ~HttpChannel() override { close(); }

  void close() override {
    curl_slist_free_all(headers_);
    headers_ = nullptr;
    if (handle_) curl_easy_cleanup(handle_);
    handle_ = nullptr;
  }

 protected:
  Attempt attempt(std::string_view payload, std::chrono::milliseconds timeout) override {
    if (!handle_) return {Attempt::Outcome::kRefused, "the exporter is shut down", {}, {}};
    std::string_view body = payload;
    if (settings_.compression == Compression::kGzip) body = compressed_ = gzip(payload);
    response_ = {};
    error_[0] = '\0';
    Attempt a;
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(handle_, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(handle_, CURLOPT_HEADERDATA, &a.retry_after);
    CURLcode code = curl_easy_perform(handle_);
    long status = 0;
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && response_.cut)) {
      a.outcome = retryable_transport_error(code) ? Attempt::Outcome::kRetryable : Attempt::Outcome::kRefused;
      a.error = error_[0] ? error_ : curl_easy_strerror(code);
      return a;
    }
    if (status >= 200 && status < 300) {
      a.outcome = Attempt::Outcome::kDelivered;
      if (!response_.body.empty() && !response_.cut)
        a.partial = json() ? parse_partial_success_json(response_.body) : parse_partial_success_proto(response_.body);
      return a;
    }
    a.outcome = retryable_status(status) ? Attempt::Outcome::kRetryable : Attempt::Outcome::kRefused;
    std::string message =
        json() ? parse_rpc_status_message_json(response_.body) : parse_rpc_status_proto(response_.body).message;
    a.error = "HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + printable_excerpt(message));
    return a;
  }

 private:
  void configure() {
    curl_easy_setopt(handle_, CURLOPT_URL, destination().c_str());
    curl_easy_setopt(handle_, CURLOPT_POST, 1L);
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(handle_, CURLOPT_USERAGENT, "lens/" LENS_VERSION_STRING " (OTLP exporter; C++)");
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_, CURLOPT_ERRORBUFFER, error_);
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(handle_, CURLOPT_WRITEDATA, &response_);
    curl_easy_setopt(handle_, CURLOPT_HEADERFUNCTION, collect_retry_after);
    if (!settings_.certificate.empty()) curl_easy_setopt(handle_, CURLOPT_CAINFO, settings_.certificate.c_str());
    if (!settings_.client_certificate.empty())
      curl_easy_setopt(handle_, CURLOPT_SSLCERT, settings_.client_certificate.c_str());
    if (!settings_.client_key.empty()) curl_easy_setopt(handle_, CURLOPT_SSLKEY, settings_.client_key.c_str());
  }

  CURL* handle_ = nullptr;
  curl_slist* headers_ = nullptr;
  Response response_;
  std::string compressed_;
  char error_[CURL_ERROR_SIZE] = {};
};

}  // namespace

std::string otlp_http_url(const OtlpSignalConfig& settings, std::string_view path) {
  if (settings.endpoint_is_per_signal) return settings.endpoint;
  std::string base = settings.endpoint.empty() ? "http://localhost:4318" : settings.endpoint;
  if (base.back() != '/') base += '/';
  return base + std::string(path);
}

std::unique_ptr<OtlpChannel> make_otlp_http_channel(const OtlpSignalConfig& settings, const OtlpSignal& signal) {
  static std::once_flag curl_ready;
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::make_unique<HttpChannel>(settings, signal);
}

}  // namespace lens::internal
