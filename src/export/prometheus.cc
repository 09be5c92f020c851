#include "export/prometheus.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cmath>
#include <cstdio>
#include <thread>

#include "common/log.h"
#include "trace/pipeline.h"

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
      {"ms", "milliseconds"}, {"s", "seconds"}, {"us", "microseconds"}, {"ns", "nanoseconds"}, {"min", "minutes"},
      {"h", "hours"},         {"By", "bytes"},  {"KiBy", "kibibytes"},  {"MiBy", "mebibytes"}, {"GiBy", "gibibytes"},
      {"%", "percent"}};
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
        out += name + "_bucket" + l + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
      }
      out += name + "_sum" + l + "} " + number(p.sum) + "\n";
      out += name + "_count" + l + "} " + std::to_string(p.count) + "\n";
    }
  }
  return out;
}

namespace {

class HttplibEndpoint final : public PrometheusEndpoint {
 public:
  HttplibEndpoint(const Config& config, Pipeline& pipeline) {
    // Bounded against whoever can reach the port: no request body is read past 4 KiB (a POST of 1 GiB grew a rank
    // by as much), a connection that sends nothing holds a worker for at most a second, every answer closes its
    // connection (an idle keep-alive would hold a worker), and no SO_REUSEPORT: a second rank on the same host
    // and port fails at setup instead of taking a random share of the scrapes.
    server_.set_payload_max_length(4096);
    server_.set_read_timeout(std::chrono::seconds(1));
    server_.set_write_timeout(std::chrono::seconds(5));
    server_.set_keep_alive_max_count(1);
    server_.set_socket_options([](int socket) {
      int yes = 1;
      ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);  // restart past TIME_WAIT; never share
    });
    server_.Get("/metrics", [&pipeline, resource = pipeline.resource()](const httplib::Request&,
                                                                         httplib::Response& response) {
      response.set_content(render_prometheus(resource, pipeline.collect_for_pull()),
                           "text/plain; version=0.0.4; charset=utf-8");
    });
    if (!server_.bind_to_port(config.prometheus_host.c_str(), config.prometheus_port)) {
      throw ConfigError("lens: cannot serve Prometheus metrics on " + config.prometheus_host + ":" +
                        std::to_string(config.prometheus_port) +
                        " (the port is taken or the host is not local); set OTEL_EXPORTER_PROMETHEUS_HOST / "
                        "OTEL_EXPORTER_PROMETHEUS_PORT");
    }
    port_ = config.prometheus_port;
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the listening loop started would be lost and the join would wait forever.
    for (int waited = 0; !server_.is_running() && waited < 5000; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~HttplibEndpoint() override { stop(); }
  void stop() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const override { return port_; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

std::unique_ptr<PrometheusEndpoint> start_prometheus_endpoint(const Config& config, Pipeline& pipeline) {
  return std::make_unique<HttplibEndpoint>(config, pipeline);
}

}  // namespace lens::internal
