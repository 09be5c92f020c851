#include "lens/config.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <string>

#include "common/text.h"
#include "config/env.h"

namespace lens {

namespace internal {
namespace {

constexpr std::int64_t kMinMetricExportIntervalMs = 100;

bool decides_by_trace_id_ratio(TracesSampler s) {
  return s == TracesSampler::kTraceIdRatio || s == TracesSampler::kParentBasedTraceIdRatio;
}

// OTEL_PROPAGATORS: a comma-separated list of tracecontext, baggage, none; any other name (b3, jaeger, xray, ...)
// is an error naming it, rather than a propagator silently missing.
void read_propagators(const EnvValue& v, Config& c) {
  c.propagate_trace_context = c.propagate_baggage = false;
  for (std::string_view raw : split(v.text, ',')) {
    const std::string name = to_lower(trim(raw));
    if (name == "tracecontext") {
      c.propagate_trace_context = true;
    } else if (name == "baggage") {
      c.propagate_baggage = true;
    } else if (name != "none" && !name.empty()) {
      throw ConfigError("lens: " + v.variable + "='" + v.text + "': unknown propagator '" + name +
                        "'; valid values: tracecontext, baggage, none (a comma-separated list)");
    }
  }
}

void read_lens_keys(const EnvReader& env, Config& c) {
  if (auto v = env.lens_key({"ENABLED"})) c.enabled = parse_flag(*v);
  if (auto v = env.lens_key({"SPAN_GROUPS"})) {
    c.span_groups = v->text;
    c.span_groups_source = v->variable;
  }
  if (auto v = env.lens_key({"RANK_STRATEGY", "EXPORT_STRATEGY"})) {
    c.rank_strategy = v->text;  // resolved where the choice is made, against the strategies registered by then
    c.rank_strategy_source = v->variable;
  }
  if (auto v = env.lens_key({"EXPORT_RANK"})) {
    c.export_rank = parse_int(*v, INT32_MIN, INT32_MAX);
    c.export_rank_source = v->variable;
  }
  if (auto v = env.lens_key({"EXPORT_SAMPLE_RATE"})) c.export_sample_rate = parse_number(*v, 0.0, 1.0);
  if (auto v = env.lens_key({"SAMPLING_STRATEGY", "SAMPLER_ENABLED"})) {
    bool alias = v->variable.ends_with("_SAMPLER_ENABLED");
    if (alias) {
      c.sampling_strategy = parse_flag(*v) ? "rank_aware" : "";  // SAMPLER_ENABLED=1 is rank_aware
    } else {
      c.sampling_strategy = v->text;  // resolved where the sampler is built
    }
    c.sampling_strategy_source = v->variable;
  }
  if (auto v = env.lens_key({"SPAN_NAMES"})) {
    c.span_names =
        parse_choice<SpanNaming>(*v, {{"documented", SpanNaming::kDocumented}, {"megatron", SpanNaming::kMegatron}});
  }
  if (auto v = env.lens_key({"TRACES_ENABLED"})) c.traces_enabled = parse_flag(*v);
  if (auto v = env.lens_key({"METRICS_ENABLED"})) c.metrics_enabled = parse_flag(*v);
  if (auto v = env.lens_key({"LOGS_ENABLED"})) c.logs_enabled = parse_flag(*v);
  if (auto v = env.lens_key({"EXPORTER"})) {
    c.exporter = parse_choice<Exporter>(
        *v, {{"otlp", Exporter::kOtlp}, {"console", Exporter::kConsole}, {"file", Exporter::kFile}});
  }
  if (auto v = env.lens_key({"FILE_DIR"})) c.file_dir = v->text;
  if (auto v = env.lens_key({"RUN_ID"})) c.run_id = v->text;
  if (auto v = env.lens_key({"USER_ID"})) c.user_id = v->text;
  if (auto v = env.lens_key({"CONTROL"})) c.control = parse_flag(*v);
  if (auto v = env.lens_key({"CONTROL_ADDRESS"})) {
    const auto colon = v->text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw ConfigError("lens: " + v->variable + "='" + v->text + "' is not host:port (e.g. 127.0.0.1:0)");
    parse_int(EnvValue{v->text.substr(colon + 1), v->variable}, 0, 65535);
    c.control_address = v->text;
  }
  if (auto v = env.lens_key({"HANG_SIGNAL"})) {
    c.hang_signal = parse_choice<int>(
        *v,
        {{"sigusr1", SIGUSR1}, {"usr1", SIGUSR1}, {"sigusr2", SIGUSR2}, {"usr2", SIGUSR2}, {"none", 0}, {"off", 0}});
  }
  if (auto v = env.lens_key({"HANG_TIMEOUT"})) {  // seconds, as a person waiting for a step thinks of it
    const double seconds = parse_number(*v, 0, 86400);
    // The watchdog counts milliseconds: a positive value that rounds to 0 would silently mean off.
    if (seconds > 0 && seconds < 0.001) throw_invalid(*v, "0 (off) or a number of seconds in [0.001, 86400]");
    c.hang_timeout_ms = std::llround(seconds * 1000);
  }
  if (auto v = env.lens_key({"DEVICE_TIMING"}))
    c.device_timing = parse_choice<DeviceTiming>(*v, {{"none", DeviceTiming::kNone}, {"cuda", DeviceTiming::kCuda}});
  if (auto v = env.lens_key({"DEVICE_SPAN_GROUPS"})) {
    c.device_span_groups = v->text;
    c.device_span_groups_source = v->variable;
  }
  // Steps per straggler window (lens/straggler.h); 0: off. A window of 1-4 steps has no median worth scoring.
  if (auto v = env.lens_key({"STRAGGLER_INTERVAL"})) {
    c.straggler_interval = parse_int(*v, 0, 1'000'000);
    if (c.straggler_interval > 0 && c.straggler_interval < 5)
      throw_invalid(*v, "0 (off) or a number of steps in [5, 1000000]");
  }
}

void read_sampler(const EnvReader& env, Config& c) {
  if (auto v = env.get("OTEL_TRACES_SAMPLER")) {
    c.traces_sampler =
        parse_choice<TracesSampler>(*v, {{"always_on", TracesSampler::kAlwaysOn},
                                         {"always_off", TracesSampler::kAlwaysOff},
                                         {"traceidratio", TracesSampler::kTraceIdRatio},
                                         {"parentbased_always_on", TracesSampler::kParentBasedAlwaysOn},
                                         {"parentbased_always_off", TracesSampler::kParentBasedAlwaysOff},
                                         {"parentbased_traceidratio", TracesSampler::kParentBasedTraceIdRatio}});
  }
  // The argument means something only to the ratio samplers; the specification ignores it elsewhere.
  if (auto v = env.get("OTEL_TRACES_SAMPLER_ARG"); v && decides_by_trace_id_ratio(c.traces_sampler))
    c.traces_sampler_ratio = parse_number(*v, 0, 1);
}

// TRACE_LAYOUT, else `step` under a trace-id ratio sampler (CONTRACT §4): there each step is a trace of its own,
// so OpenTelemetry's rule, deciding by trace id, keeps that share of steps; in one segment trace it decides once.
void read_trace_layout(const EnvReader& env, Config& c) {
  if (auto v = env.lens_key({"TRACE_LAYOUT"})) {
    c.trace_layout = parse_choice<TraceLayout>(*v, {{"segment", TraceLayout::kSegment}, {"step", TraceLayout::kStep}});
  } else if (decides_by_trace_id_ratio(c.traces_sampler)) {
    c.trace_layout = TraceLayout::kStep;
  }
}

BatchConfig read_batch(const EnvReader& env, std::string_view prefix, BatchConfig b) {
  auto name = [&](std::string_view key) { return std::string(prefix) + std::string(key); };
  if (auto v = env.get(name("SCHEDULE_DELAY"))) b.schedule_delay_ms = parse_duration_ms(*v, 0);
  if (auto v = env.get(name("EXPORT_TIMEOUT"))) b.export_timeout_ms = parse_duration_ms(*v, 0);
  if (auto v = env.get(name("MAX_QUEUE_SIZE"))) b.max_queue_size = parse_int(*v, 1, INT32_MAX);
  if (auto v = env.get(name("MAX_EXPORT_BATCH_SIZE"))) {
    b.max_export_batch_size = parse_int(*v, 1, INT32_MAX);
    if (b.max_export_batch_size > b.max_queue_size)
      throw_invalid(*v, "an integer >= 1 and <= the queue size " + std::to_string(b.max_queue_size) +
                            " (the specification requires batch size <= queue size)");
  }
  return b;
}

void read_limits(const EnvReader& env, Limits& l) {
  // A model-specific limit wins over the general OTEL_ATTRIBUTE_* one.
  auto limit = [&](std::string_view specific, std::string_view general) -> std::optional<std::int64_t> {
    if (auto v = env.get(specific)) return parse_int(*v, 0, INT32_MAX);
    if (general.empty()) return std::nullopt;
    if (auto v = env.get(general)) return parse_int(*v, 0, INT32_MAX);
    return std::nullopt;
  };
  constexpr std::string_view kValueLength = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT";
  constexpr std::string_view kCount = "OTEL_ATTRIBUTE_COUNT_LIMIT";
  l.span_attribute_value_length = limit("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", kValueLength);
  l.log_attribute_value_length = limit("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", kValueLength);
  if (auto n = limit("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", kCount)) l.span_attribute_count = *n;
  if (auto n = limit("OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT", kCount)) l.log_attribute_count = *n;
  if (auto n = limit("OTEL_SPAN_EVENT_COUNT_LIMIT", "")) l.span_event_count = *n;
  if (auto n = limit("OTEL_SPAN_LINK_COUNT_LIMIT", "")) l.span_link_count = *n;
  if (auto n = limit("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", kCount)) l.event_attribute_count = *n;
  if (auto n = limit("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", kCount)) l.link_attribute_count = *n;
}

void read_metrics(const EnvReader& env, Config& c) {
  // At least 100 ms: a collection and an export each millisecond would keep the export thread busy.
  if (auto v = env.get("OTEL_METRIC_EXPORT_INTERVAL"))
    c.metric_export_interval_ms = parse_duration_ms(*v, kMinMetricExportIntervalMs);
  if (auto v = env.get("OTEL_METRIC_EXPORT_TIMEOUT")) c.metric_export_timeout_ms = parse_duration_ms(*v, 0);
  if (auto v = env.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")) {
    c.metrics_temporality = parse_choice<Temporality>(*v, {{"cumulative", Temporality::kCumulative},
                                                           {"delta", Temporality::kDelta},
                                                           {"lowmemory", Temporality::kLowMemory}});
  }
  // One exporter per signal: a list such as `otlp,console` is refused with the rest (lens sends a signal to one
  // place).
  using SE = SignalExporter;
  if (auto v = env.get("OTEL_TRACES_EXPORTER"))
    c.traces_exporter = parse_choice<SE>(*v, {{"otlp", SE::kOtlp}, {"console", SE::kConsole}, {"none", SE::kNone}});
  if (auto v = env.get("OTEL_METRICS_EXPORTER")) {
    c.metrics_exporter = parse_choice<SE>(
        *v, {{"otlp", SE::kOtlp}, {"prometheus", SE::kPrometheus}, {"console", SE::kConsole}, {"none", SE::kNone}});
  }
  if (auto v = env.get("OTEL_LOGS_EXPORTER"))
    c.logs_exporter = parse_choice<SE>(*v, {{"otlp", SE::kOtlp}, {"console", SE::kConsole}, {"none", SE::kNone}});
  if (auto v = env.get("OTEL_EXPORTER_PROMETHEUS_HOST")) c.prometheus_host = v->text;
  if (auto v = env.get("OTEL_EXPORTER_PROMETHEUS_PORT")) c.prometheus_port = static_cast<int>(parse_int(*v, 1, 65535));
}

// An OTLP endpoint is a URL without credentials or a fragment (gRPC hands the whole text to its resolver, which
// logs it: a user:token@ or a #token was printed with every warning), and without spaces or control bytes. The
// value is never shown in the error: it may hold the token.
void check_endpoint(EnvValue v) {
  const std::string& url = v.text;
  const std::size_t scheme = url.find("://");
  const std::size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const std::size_t authority_end = std::min(url.find_first_of("/?#", authority), url.size());
  const bool credentials = url.find('@', authority) < authority_end || url.find('#') != std::string::npos;
  const bool control = std::any_of(url.begin(), url.end(), [](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) == 0x7f;
  });
  v.secret = true;
  if (credentials)
    throw_invalid(v,
                  "a URL without credentials (user:token@) or a #fragment: send a token as a header "
                  "(OTEL_EXPORTER_OTLP_HEADERS), never in the URL");
  if (control) throw_invalid(v, "a URL without spaces or control bytes");
}

OtlpSignalConfig read_otlp(const EnvReader& env, std::string_view signal) {
  // The per-signal variable wins over the general one (OTLP exporter specification).
  auto pick = [&](std::string_view key) {
    std::optional<EnvValue> v = env.get("OTEL_EXPORTER_OTLP_" + std::string(signal) + "_" + std::string(key));
    return v ? v : env.get("OTEL_EXPORTER_OTLP_" + std::string(key));
  };
  OtlpSignalConfig s;
  if (auto v = pick("PROTOCOL")) {
    s.protocol = parse_choice<OtlpProtocol>(*v, {{"grpc", OtlpProtocol::kGrpc},
                                                 {"http/protobuf", OtlpProtocol::kHttpProtobuf},
                                                 {"http/json", OtlpProtocol::kHttpJson}});
  }
  if (auto v = pick("ENDPOINT")) {
    check_endpoint(*v);
    s.endpoint = v->text;
    s.endpoint_is_per_signal = v->variable.find(signal) != std::string::npos;
  }
  if (auto v = pick("HEADERS")) {
    v->secret = true;
    s.headers = parse_headers(*v);
  }
  if (auto v = pick("TIMEOUT")) s.timeout_ms = parse_duration_ms(*v, 0);
  if (auto v = pick("COMPRESSION"))
    s.compression = parse_choice<Compression>(*v, {{"gzip", Compression::kGzip}, {"none", Compression::kNone}});
  if (auto v = pick("CERTIFICATE")) s.certificate = v->text;
  if (auto v = pick("CLIENT_KEY")) s.client_key = v->text;
  if (auto v = pick("CLIENT_CERTIFICATE")) s.client_certificate = v->text;
  if (auto v = pick("INSECURE")) s.insecure = parse_otel_bool(*v);
  return s;
}

}  // namespace

Config config_from(const EnvLookup& lookup, std::string_view prefix, std::string_view fallback_prefix,
                   std::string_view default_service_name, const Catalogue& catalogue) {
  EnvReader env(lookup, prefix, fallback_prefix);
  Config c;
  c.catalogue = catalogue;
  read_lens_keys(env, c);
  c.service_name = std::string(default_service_name);
  if (auto v = env.get("OTEL_SERVICE_NAME")) c.service_name = v->text;
  if (auto v = env.get("OTEL_SDK_DISABLED")) c.sdk_disabled = parse_otel_bool(*v);
  if (auto v = env.get("OTEL_PROPAGATORS")) read_propagators(*v, c);
  read_sampler(env, c);
  read_trace_layout(env, c);
  c.span_batch = read_batch(env, "OTEL_BSP_", c.span_batch);
  c.log_batch = read_batch(env, "OTEL_BLRP_", c.log_batch);
  read_limits(env, c.limits);
  read_metrics(env, c);
  if (auto v = env.get("OTEL_RESOURCE_ATTRIBUTES")) c.resource_attributes = v->text;
  c.otlp_traces = read_otlp(env, "TRACES");
  c.otlp_metrics = read_otlp(env, "METRICS");
  c.otlp_logs = read_otlp(env, "LOGS");
  return c;
}

}  // namespace internal

Config Config::from_env(std::string_view prefix, std::string_view fallback_prefix,
                        std::string_view default_service_name, const Catalogue& catalogue) {
  return internal::config_from(internal::process_env(), prefix, fallback_prefix, default_service_name, catalogue);
}

void Config::apply_cli(bool otel_enabled, std::string_view otel_service_name, std::string_view otel_span_groups) {
  if (otel_enabled) enabled = true;  // the flag can only turn telemetry on
  if (auto name = internal::trim(otel_service_name); !name.empty()) service_name = std::string(name);
  if (auto spec = internal::trim(otel_span_groups); !spec.empty()) {
    span_groups = std::string(spec);
    span_groups_source = "--otel-span-groups";
  }
}

std::string_view to_string(Exporter e) {
  switch (e) {
    case Exporter::kOtlp: return "otlp";
    case Exporter::kConsole: return "console";
    case Exporter::kFile: return "file";
  }
  return "?";
}

std::string_view to_string(OtlpProtocol p) {
  switch (p) {
    case OtlpProtocol::kGrpc: return "grpc";
    case OtlpProtocol::kHttpProtobuf: return "http/protobuf";
    case OtlpProtocol::kHttpJson: return "http/json";
  }
  return "?";
}

std::string_view to_string(TracesSampler s) {
  switch (s) {
    case TracesSampler::kAlwaysOn: return "always_on";
    case TracesSampler::kAlwaysOff: return "always_off";
    case TracesSampler::kTraceIdRatio: return "traceidratio";
    case TracesSampler::kParentBasedAlwaysOn: return "parentbased_always_on";
    case TracesSampler::kParentBasedAlwaysOff: return "parentbased_always_off";
    case TracesSampler::kParentBasedTraceIdRatio: return "parentbased_traceidratio";
  }
  return "?";
}

std::string Config::summary() const {
  std::string s = "enabled=" + std::string(active() ? "1" : "0");
  if (sdk_disabled) s += " (OTEL_SDK_DISABLED)";
  s += " service=" + service_name + " span_groups='" + span_groups + "' rank_strategy=" + rank_strategy;
  if (!sampling_strategy.empty()) s += " sampling_strategy=" + sampling_strategy;
  s += " sampler=" + std::string(to_string(traces_sampler));
  if (internal::decides_by_trace_id_ratio(traces_sampler)) s += "(" + std::to_string(traces_sampler_ratio) + ")";
  s += " exporter=" + std::string(to_string(exporter));
  if (exporter == Exporter::kFile) s += " file_dir=" + file_dir;
  if (exporter == Exporter::kOtlp) {
    s += " otlp_traces=" + std::string(to_string(otlp_traces.protocol));
    if (!otlp_traces.endpoint.empty()) s += "@" + internal::redact_url(otlp_traces.endpoint);
    if (!otlp_traces.headers.empty()) s += " (" + std::to_string(otlp_traces.headers.size()) + " headers)";
  }
  for (auto [name, chosen] :
       {std::pair{"traces", traces_exporter}, {"metrics", metrics_exporter}, {"logs", logs_exporter}}) {
    if (chosen == SignalExporter::kOtlp) s += std::string(" ") + name + "_exporter=otlp";
    if (chosen == SignalExporter::kConsole) s += std::string(" ") + name + "_exporter=console";
    if (chosen == SignalExporter::kPrometheus) s += std::string(" ") + name + "_exporter=prometheus";
  }
  if (trace_layout == TraceLayout::kStep) s += " trace_layout=step";
  if (span_names == SpanNaming::kMegatron) s += " span_names=megatron";
  // A signal whose OTEL_<SIGNAL>_EXPORTER is `none` is off, as setup treats it.
  s += " signals=";
  s += traces_enabled && traces_exporter != SignalExporter::kNone ? "T" : "-";
  s += metrics_enabled && metrics_exporter != SignalExporter::kNone ? "M" : "-";
  s += logs_enabled && logs_exporter != SignalExporter::kNone ? "L" : "-";
  return s;
}

}  // namespace lens
