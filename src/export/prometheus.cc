#include "export/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/http_server.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "common/process_identity.h"
#include "common/text.h"

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
      {"ms", "milliseconds"}, {"s", "seconds"},   {"us", "microseconds"}, {"ns", "nanoseconds"}, {"min", "minutes"},
      {"h", "hours"},         {"By", "bytes"},    {"KiBy", "kibibytes"},  {"MiBy", "mebibytes"}, {"GiBy", "gibibytes"},
      {"%", "percent"},       {"Cel", "celsius"}, {"W", "watts"},         {"Hz", "hertz"}};
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
// The run's identity labels (nemo_run_id, service_instance_id: this process's), then the point's; a point that names
// an identity key itself (a series the scoring rank records about another rank) keeps its own value.
std::string labels(const ResourceAttributes& point, const ResourceAttributes& identity) {
  std::string out = "{";
  auto add = [&](const std::string& k, const ResourceValue& v) {
    out += (out.size() > 1 ? "," : "") + sanitize(k) + "=\"" + escape_label(value_text(v)) + "\"";
  };
  for (const auto& [k, v] : identity)
    if (find(point, k.c_str()) == nullptr) add(k, v);
  for (const auto& [k, v] : point) add(k, v);
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
  ResourceAttributes identity;
  for (const char* key : {"nemo.run.id", "service.instance.id"})
    if (const ResourceValue* v = find(resource.attributes, key)) identity.emplace_back(key, *v);
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

// GET /metrics, served by an HttpServer (libmicrohttpd's one event-driven thread, bounded: common/http_server.h).
// Idle connections hold no thread, so they cannot delay a scrape from another address (with a thread per
// connection, 8 idle ones delayed it by 8.7 s). No request body is read: one announced past 4 KiB is answered 413.
class MicrohttpdEndpoint final : public PrometheusEndpoint {
 public:
  static constexpr unsigned long long kMaxBody = 4096;

  MicrohttpdEndpoint(const Config& config, int port, const Resource& resource, MetricSchedule& metrics) try
      : resource_(resource),
        metrics_(metrics),
        server_(config.prometheus_host, port, [this](const HttpRequest& r) { return respond(r); }) {
  } catch (const std::runtime_error&) {
    throw ConfigError("lens: cannot serve Prometheus metrics on " + config.prometheus_host + ":" +
                      std::to_string(port) +
                      " (the port is taken or the host is not local; a rank serves OTEL_EXPORTER_PROMETHEUS_PORT + "
                      "its local rank); set OTEL_EXPORTER_PROMETHEUS_HOST / OTEL_EXPORTER_PROMETHEUS_PORT");
  }
  void stop() override { server_.stop(); }
  int port() const override { return server_.port(); }

 private:
  HttpResponse respond(const HttpRequest& request) {
    HttpResponse r;
    if (request.method != "GET" && request.method != "HEAD") {
      const char* length = request.header("Content-Length");
      const bool large = length != nullptr && std::strtoull(length, nullptr, 10) > kMaxBody;
      r.status = large ? 413 : 405;
      r.body = "lens serves GET /metrics only\n";
    } else if (request.path != "/metrics") {
      r.status = 404;
      r.body = "lens serves GET /metrics only\n";
    } else {
      r.body = render_prometheus(resource_, metrics_.collect_for_pull());
      r.type = "text/plain; version=0.0.4; charset=utf-8";
    }
    return r;
  }

  const Resource& resource_;
  MetricSchedule& metrics_;
  HttpServer server_;
};

}  // namespace

std::unique_ptr<PrometheusEndpoint> start_prometheus_endpoint(const Config& config, int port, const Resource& resource,
                                                              MetricSchedule& metrics) {
  return std::make_unique<MicrohttpdEndpoint>(config, port, resource, metrics);
}

int prometheus_port_of(const Config& config, int local_rank) {
  const long port = static_cast<long>(config.prometheus_port) + std::max(0, local_rank);
  return port <= 65535 ? static_cast<int>(port) : 0;
}

std::string prometheus_target_json(const Config& config, int port, const std::string& run_id, int rank,
                                   int local_rank) {
  std::string host = config.prometheus_host;
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") host = this_host();
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";  // an IPv6 address
  return "[{\"targets\": [" + json_string(host + ":" + std::to_string(port)) +
         "], \"labels\": {\"nemo_run_id\": " + json_string(run_id) + ", \"dl_rank\": \"" + std::to_string(rank) +
         "\", \"dl_local_rank\": \"" + std::to_string(local_rank) + "\"}}]\n";
}

}  // namespace lens::internal
