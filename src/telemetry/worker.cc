#include "lens/worker.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "common/text.h"

namespace lens {

namespace {

constexpr std::string_view kHeader = "lens-worker-bootstrap 1";

// %XX for '%', control characters, '=' and ',' (so values can hold lists and keys hold anything).
std::string escape(std::string_view s) {
  return internal::percent_encode(
      s, [](unsigned char c) { return c == '%' || c == '=' || c == ',' || c < 0x20 || c == 0x7f; });
}

bool unescape(std::string_view s, std::string& out) {
  std::optional<std::string> decoded = internal::percent_decode(s);
  if (decoded) out = std::move(*decoded);
  return decoded.has_value();
}

}  // namespace

std::string WorkerBootstrap::serialize() const {
  std::string out(kHeader);
  auto line = [&](std::string_view key, std::string_view value) {
    out += '\n';
    out += key;
    out += '=';
    out += value;
  };
  line("enabled", enabled ? "1" : "0");
  line("service_name", escape(service_name));
  line("span_groups", escape(span_groups));
  std::string groups;
  for (const std::string& g : resolved_span_groups) groups += (groups.empty() ? "" : ",") + escape(g);
  line("resolved_span_groups", groups);
  line("rank", std::to_string(rank));
  line("world_size", std::to_string(world_size));
  line("run_id", escape(run_id));
  line("link", link.is_valid() ? to_traceparent(link) : "");
  for (const auto& [key, value] : resource_attrs) {
    std::string typed;
    if (auto* s = std::get_if<std::string>(&value)) typed = "s:" + escape(*s);
    if (auto* b = std::get_if<bool>(&value)) typed = std::string("b:") + (*b ? "1" : "0");
    if (auto* i = std::get_if<std::int64_t>(&value)) typed = "i:" + std::to_string(*i);
    if (auto* d = std::get_if<double>(&value)) {
      char text[40];
      std::snprintf(text, sizeof text, "d:%.17g", *d);
      typed = text;
    }
    line("resource." + escape(key), typed);
  }
  return out;
}

WorkerBootstrap WorkerBootstrap::parse(std::string_view text) {
  WorkerBootstrap b;
  int number = 0;
  auto fail = [&](const std::string& why) -> WorkerBootstrap {
    throw ConfigError("lens: malformed worker bootstrap, line " + std::to_string(number) + ": " + why);
  };
  std::size_t at = 0;
  bool header = true;
  while (at <= text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++number;
    if (header) {
      if (line != kHeader) fail("expected '" + std::string(kHeader) + "'");
      header = false;
      continue;
    }
    if (line.empty()) continue;
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) fail("no '='");
    std::string_view key = line.substr(0, eq), raw = line.substr(eq + 1);
    std::string value;
    auto number_of = [&](std::string_view v) {
      const std::optional<std::int64_t> n = internal::whole_number(v);
      if (!n) fail("not an integer: " + std::string(key));
      return *n;
    };
    if (key == "enabled") {
      b.enabled = raw == "1";
    } else if (key == "service_name" || key == "span_groups" || key == "run_id") {
      if (!unescape(raw, value)) fail("bad escape in " + std::string(key));
      (key == "service_name" ? b.service_name : key == "span_groups" ? b.span_groups : b.run_id) = value;
    } else if (key == "resolved_span_groups") {
      for (std::string_view rest = raw; !rest.empty();) {
        std::size_t comma = rest.find(',');
        if (!unescape(rest.substr(0, comma), value)) fail("bad escape in resolved_span_groups");
        b.resolved_span_groups.push_back(value);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
    } else if (key == "rank" || key == "world_size") {
      (key == "rank" ? b.rank : b.world_size) = static_cast<int>(number_of(raw));
    } else if (key == "link") {
      if (!raw.empty()) {
        auto context = from_traceparent(raw);
        if (!context) fail("not a traceparent: link");
        b.link = *context;
      }
    } else if (key.starts_with("resource.")) {
      std::string name;
      if (!unescape(key.substr(9), name) || raw.size() < 2 || raw[1] != ':') fail("bad resource attribute");
      std::string_view v = raw.substr(2);
      switch (raw[0]) {
        case 's':
          if (!unescape(v, value)) fail("bad escape in " + name);
          b.resource_attrs.emplace_back(name, value);
          break;
        case 'b': b.resource_attrs.emplace_back(name, v == "1"); break;
        case 'i': b.resource_attrs.emplace_back(name, static_cast<std::int64_t>(number_of(v))); break;
        case 'd': b.resource_attrs.emplace_back(name, std::strtod(std::string(v).c_str(), nullptr)); break;
        default: fail("unknown type of " + name);
      }
    } else {
      fail("unknown key " + std::string(key));
    }
  }
  if (header) fail("empty");
  return b;
}

WorkerBootstrap build_worker_bootstrap(const Telemetry& telemetry, ResourceAttributes resource_attrs,
                                       const SpanContext& link) {
  WorkerBootstrap b;
  const Config& config = telemetry.config();
  b.enabled = telemetry.is_exporting();
  b.service_name = config.service_name;
  b.span_groups = config.span_groups;
  const std::string groups = describe(config.catalogue, telemetry.resolved_span_groups());
  for (std::size_t at = 0; at < groups.size();) {
    std::size_t comma = groups.find(',', at);
    if (comma == std::string::npos) comma = groups.size();
    std::string name = groups.substr(at, comma - at);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    if (!name.empty()) b.resolved_span_groups.push_back(name);
    at = comma + 1;
  }
  b.rank = telemetry.ranks().rank;
  b.world_size = telemetry.ranks().world_size;
  b.run_id = telemetry.run_id();
  b.resource_attrs = std::move(resource_attrs);
  b.link = config.propagate_trace_context ? link : SpanContext{};  // OTEL_PROPAGATORS without tracecontext
  return b;
}

void ignore_hang_signal_in_helper(int hang_signal) noexcept {
  if (hang_signal == 0) return;
  struct sigaction current {};
  // Only where nothing handles it: a helper's own handler (the application's) is left alone.
  if (::sigaction(hang_signal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(hang_signal, SIG_IGN);
}

Telemetry setup_worker_telemetry(const WorkerBootstrap& b, Config config) {
  // A helper never takes its rank's place: the rank serves the control endpoint and writes the hang snapshot
  // (rank<R>.snapshot.json); a worker that did too overwrote them (a switch that never applied, a wrong verdict).
  // The hang signal, which reaches the helper with its rank (a signal to the process group, pkill), is ignored
  // here rather than left to its default action, which ends the process.
  ignore_hang_signal_in_helper(config.hang_signal);
  config.control = false;
  config.hang_signal = 0;
  config.hang_timeout_ms = 0;
  config.enabled = b.enabled;
  config.service_name = b.service_name;
  config.span_groups = b.span_groups;
  config.span_groups_source = "the worker bootstrap's span groups";
  config.run_id = b.run_id;
  config.rank_strategy = "all_ranks";  // the worker exports exactly when its rank does: `enabled` says which
  config.rank_strategy_source = "the worker bootstrap";
  return setup_telemetry(
      config, {.rank = b.rank, .world_size = b.world_size, .resource_attributes = b.resource_attrs, .reinit = true});
}

}  // namespace lens
