#include "export/prometheus.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace lens::internal {

namespace {

std::string sanitize(std::string_view name) {
  std::string out;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
    out += ok ? c : '_';
  }
  if (!out.empty() && out[0] >= '0' && out[0] <= '9') out.insert(out.begin(), '_');
  return out;
}

// The OpenTelemetry-to-Prometheus unit words; annotations such as {span} add nothing.
std::string unit_word(const MetricData& m) {
  static const std::pair<const char*, const char*> kUnits[] = {
      {"ms", "milliseconds"}, {"s", "seconds"},      {"us", "microseconds"}, {"ns", "nanoseconds"},
      {"min", "minutes"},     {"h", "hours"},        {"By", "bytes"},        {"KiBy", "kibibytes"},
      {"MiBy", "mebibytes"},  {"GiBy", "gibibytes"}, {"%", "percent"}};
  if (m.unit.empty() || m.unit.front() == '{') return {};
  if (m.unit == "1") return m.kind == InstrumentKind::kGauge ? "ratio" : "";
  for (auto [unit, word] : kUnits)
    if (m.unit == unit) return word;
  return sanitize(m.unit);
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string value_text(const ResourceValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", std::get<double>(v));
  return buf;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const ResourceValue* find(const ResourceAttributes& attributes, const char* key) {
  for (const auto& [k, v] : attributes)
    if (k == key) return &v;
  return nullptr;
}

// `{a="1",b="2"` without the closing brace, so `le` can follow.
std::string labels(const ResourceAttributes& point, const std::string& identity) {
  std::string out = "{" + identity;
  for (const auto& [k, v] : point) out += "," + sanitize(k) + "=\"" + escape_label(value_text(v)) + "\"";
  return out;
}

}  // namespace

std::string prometheus_name(const MetricData& m) {
  std::string name = sanitize(m.name);
  std::string unit = unit_word(m);
  if (!unit.empty() && !name.ends_with("_" + unit)) name += "_" + unit;
  if (m.kind == InstrumentKind::kCounter && !name.ends_with("_total")) name += "_total";
  return name;
}

std::string render_prometheus(const Resource& resource, const std::vector<MetricData>& metrics) {
  std::string identity;
  for (const char* key : {"nemo.run.id", "service.instance.id"}) {
    if (const ResourceValue* v = find(resource.attributes, key)) {
      if (!identity.empty()) identity += ",";
      identity += sanitize(key) + "=\"" + escape_label(value_text(*v)) + "\"";
    }
  }
  std::string out = "# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info{";
  bool first = true;
  for (const auto& [k, v] : resource.attributes) {
    out += (first ? "" : ",") + sanitize(k) + "=\"" + escape_label(value_text(v)) + "\"";
    first = false;
  }
  out += "} 1\n";
  for (const MetricData& m : metrics) {
    std::string name = prometheus_name(m);
    const char* type = m.kind == InstrumentKind::kCounter     ? "counter"
                       : m.kind == InstrumentKind::kHistogram ? "histogram"
                                                              : "gauge";
    if (!m.description.empty()) out += "# HELP " + name + " " + m.description + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const MetricPoint& p : m.points) {
      std::string l = labels(p.attributes, identity);
      if (m.kind != InstrumentKind::kHistogram) {
        out += name + l + "} " + (m.integer ? std::to_string(p.int_value) : number(p.double_value)) + "\n";
        continue;
      }
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b < p.bucket_counts.size(); ++b) {
        cumulative += p.bucket_counts[b];
        std::string le = b < m.bounds.size() ? number(m.bounds[b]) : "+Inf";
        out.append(name).append("_bucket").append(l).append(",le=\"").append(le).append("\"} ");
        out.append(std::to_string(cumulative)).append("\n");
      }
      out.append(name).append("_sum").append(l).append("} ").append(number(p.sum)).append("\n");
      out.append(name).append("_count").append(l).append("} ").append(std::to_string(p.count)).append("\n");
    }
  }
  return out;
}

namespace {

// A listening socket on host:port with SO_REUSEADDR (restart past TIME_WAIT) and never SO_REUSEPORT: a second
// rank on the same host and port fails here instead of taking a random share of the scrapes.
int listen_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

// GET /metrics from libmicrohttpd's one event-driven thread. Bounded against whoever can reach the port: at most
// kMaxConnections at once and kMaxConnectionsPerAddress from one address (each an open file of the training
// process), a connection idle for kIdleSeconds is closed, a request's headers live in kConnectionMemory, and no
// request body is read (one announced past 4 KiB is answered 413). Idle connections hold no thread, so they
// cannot delay a scrape from another address (with a thread per connection, 8 idle ones delayed it by 8.7 s).
class MicrohttpdEndpoint final : public PrometheusEndpoint {
 public:
  static constexpr unsigned kMaxConnections = 64;
  static constexpr unsigned kMaxConnectionsPerAddress = 16;
  static constexpr unsigned kIdleSeconds = 2;
  static constexpr std::size_t kConnectionMemory = 16 << 10;
  static constexpr unsigned long long kMaxBody = 4096;

  MicrohttpdEndpoint(const Config& config, const Resource& resource, MetricSchedule& metrics)
      : resource_(resource), metrics_(metrics) {
    const int fd = listen_socket(config.prometheus_host, config.prometheus_port);
    if (fd >= 0) {
      daemon_ =
          MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, nullptr, nullptr, &MicrohttpdEndpoint::answer, this,
                           MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
                           MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerAddress, MHD_OPTION_CONNECTION_TIMEOUT,
                           kIdleSeconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory, MHD_OPTION_END);
      if (daemon_ == nullptr) ::close(fd);
    }
    if (daemon_ == nullptr) {
      throw ConfigError("lens: cannot serve Prometheus metrics on " + config.prometheus_host + ":" +
                        std::to_string(config.prometheus_port) +
                        " (the port is taken or the host is not local); set OTEL_EXPORTER_PROMETHEUS_HOST / "
                        "OTEL_EXPORTER_PROMETHEUS_PORT");
    }
    port_ = config.prometheus_port;
  }
  ~MicrohttpdEndpoint() override { stop(); }
  void stop() override {
    if (daemon_ != nullptr) MHD_stop_daemon(daemon_);  // closes the listening socket and every connection
    daemon_ = nullptr;
  }
  int port() const override { return port_; }

 private:
  static MHD_Result answer(void* self, MHD_Connection* connection, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/, std::size_t* /*upload_size*/,
                           void** /*request_state*/) {
    try {
      return static_cast<MicrohttpdEndpoint*>(self)->respond(connection, url, method);
    } catch (...) {
      return MHD_NO;  // no memory for the text: the connection is closed, the rank goes on
    }
  }

  // Answered on the first call, when the headers are in: a body is never read.
  MHD_Result respond(MHD_Connection* connection, std::string_view url, std::string_view method) {
    unsigned status = MHD_HTTP_OK;
    std::string body;
    const char* type = "text/plain; version=0.0.4; charset=utf-8";
    if (method != "GET" && method != "HEAD") {
      const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      const bool large = length != nullptr && std::strtoull(length, nullptr, 10) > kMaxBody;
      status = large ? MHD_HTTP_CONTENT_TOO_LARGE : MHD_HTTP_METHOD_NOT_ALLOWED;
      body = "lens serves GET /metrics only\n";
      type = "text/plain; charset=utf-8";
    } else if (url != "/metrics") {
      status = MHD_HTTP_NOT_FOUND;
      body = "lens serves GET /metrics only\n";
      type = "text/plain; charset=utf-8";
    } else {
      body = render_prometheus(resource_, metrics_.collect_for_pull());
    }
    MHD_Response* response = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status != MHD_HTTP_OK) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    const MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
  }

  const Resource& resource_;
  MetricSchedule& metrics_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace

std::unique_ptr<PrometheusEndpoint> start_prometheus_endpoint(const Config& config, const Resource& resource,
                                                              MetricSchedule& metrics) {
  return std::make_unique<MicrohttpdEndpoint>(config, resource, metrics);
}

}  // namespace lens::internal
