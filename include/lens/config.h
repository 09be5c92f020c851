// lens/config.h: configuration from the environment and the command line (CONTRACT §2).
//
// Each lens key is read as <PREFIX>_<KEY>, then <FALLBACK>_<KEY>, then its default; values are trimmed and an
// empty value counts as unset. The standard OpenTelemetry SDK variables (OTEL_*) are read as the OpenTelemetry
// specification defines them. Every bad value throws lens::ConfigError at setup, naming the variable, the value
// and what is valid, so a typo fails on every rank before training starts. Header values
// (OTEL_EXPORTER_OTLP_*HEADERS, usually tokens) never appear in a message.
//
//   lens::Config config = lens::Config::from_env("MYTRAINER_OTEL", "NEMO_LENS", "my-trainer");
//   config.apply_cli(/*enabled=*/flags.otel_enabled, flags.otel_service_name, flags.otel_span_groups);
//   lens::Telemetry telemetry = lens::setup_telemetry(config);
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lens/config_error.h"
#include "lens/groups.h"
#include "lens/internal/visibility.h"

namespace lens {

// OpenTelemetry SeverityNumber of a log record: each level is the first of its range of four (lens/log.h).
enum class Severity : int { kTrace = 1, kDebug = 5, kInfo = 9, kWarn = 13, kError = 17, kFatal = 21 };

inline constexpr std::string_view kFallbackEnvPrefix = "NEMO_LENS";

enum class Exporter { kOtlp, kConsole, kFile };
// TRACE_LAYOUT (CONTRACT §6): kSegment, the reference's shape (a trace per --save-interval); kStep, one trace per
// iteration shared by every rank (step_trace_id), each rank's step span a child of its one root, `lens.step`.
enum class TraceLayout { kSegment, kStep };
// SPAN_NAMES (CONTRACT §6): kDocumented, the span tree as the documentation draws it; kMegatron, the names
// Megatron-LM's code exports (lens::megatron::span_names gives both sets).
enum class SpanNaming { kDocumented, kMegatron };
// DEVICE_TIMING (CONTRACT §2): kCuda times the spans of DEVICE_SPAN_GROUPS on the GPU with CUDA events (docs/GPU.md).
enum class DeviceTiming { kNone, kCuda };
enum class OtlpProtocol { kGrpc, kHttpProtobuf, kHttpJson };
enum class Compression { kNone, kGzip };
enum class TracesSampler {
  kAlwaysOn,
  kAlwaysOff,
  kTraceIdRatio,
  kParentBasedAlwaysOn,
  kParentBasedAlwaysOff,
  kParentBasedTraceIdRatio,
};
enum class Temporality { kCumulative, kDelta, kLowMemory };
// Where one signal goes (OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER, OTEL_LOGS_EXPORTER). kFollow, when unset:
// the lens key EXPORTER decides; kNone turns the signal off; kPrometheus is for metrics only (pulled by a
// scrape, not pushed).
enum class SignalExporter { kFollow, kOtlp, kConsole, kNone, kPrometheus };

// OTEL_BSP_* / OTEL_BLRP_*: the batch processors of traces and logs.
// Every delay, interval and timeout is at most one day: read from the environment, a larger value is an error;
// set in code, it is clamped where it is used. So no deadline computation can overflow.
inline constexpr std::int64_t kMaxDurationMs = std::int64_t{24} * 60 * 60 * 1000;

struct BatchConfig {
  std::int64_t schedule_delay_ms;
  std::int64_t export_timeout_ms;
  std::int64_t max_queue_size;
  std::int64_t max_export_batch_size;
};

// OTEL_{SPAN,EVENT,LINK,LOGRECORD,ATTRIBUTE}_*_LIMIT. nullopt = no limit.
struct Limits {
  std::optional<std::int64_t> span_attribute_value_length;
  std::int64_t span_attribute_count = 128;
  std::int64_t span_event_count = 128;
  std::int64_t span_link_count = 128;
  std::int64_t event_attribute_count = 128;
  std::int64_t link_attribute_count = 128;
  std::optional<std::int64_t> log_attribute_value_length;
  std::int64_t log_attribute_count = 128;
};

// OTEL_EXPORTER_OTLP_[<SIGNAL>_]*: the settings of one signal, each already resolved from the per-signal
// variable, else the general one, else the specification's default.
struct OtlpSignalConfig {
  OtlpProtocol protocol = OtlpProtocol::kGrpc;
  std::string endpoint;                 // as configured; empty = the protocol's default
  bool endpoint_is_per_signal = false;  // a per-signal endpoint is used as-is, a general one gets /v1/<signal>
  std::vector<std::pair<std::string, std::string>> headers;  // percent-decoded; never print the values
  std::int64_t timeout_ms = 10000;
  Compression compression = Compression::kNone;
  std::string certificate, client_key, client_certificate;
  bool insecure = false;
};

LENS_ABI_NAMESPACE_BEGIN

struct Config {
  // lens keys (CONTRACT §2 table).
  bool enabled = false;
  std::string service_name;
  std::string span_groups = "default";
  std::string span_groups_source = "the default span-group spec";  // variable or flag the spec came from
  std::string rank_strategy = "single_rank";
  std::string rank_strategy_source = "the default rank strategy";
  std::int64_t export_rank = -1;
  std::string export_rank_source = "the export rank set in code";  // variable it came from
  double export_sample_rate = 1.0;
  std::string sampling_strategy;  // empty: the OTel SDK sampler alone
  std::string sampling_strategy_source;
  bool traces_enabled = true;
  bool metrics_enabled = true;
  bool logs_enabled = false;
  Severity min_log_severity = Severity::kTrace;  // records below it are not logged (set in code)
  Exporter exporter = Exporter::kOtlp;
  std::string file_dir = "./telemetry";
  TraceLayout trace_layout = TraceLayout::kSegment;
  SpanNaming span_names = SpanNaming::kDocumented;
  std::string run_id;
  std::string user_id;
  // The control endpoint on rank 0 (lens/control.h): P_CONTROL, P_CONTROL_ADDRESS (host:port; port 0: any free).
  bool control = false;
  std::string control_address = "127.0.0.1:0";
  // Hang snapshots (every rank writes rank<R>.snapshot.json, read by `lens hang`): on P_HANG_SIGNAL (SIGUSR1 by
  // default, SIGUSR2, or 0 for none) and, with P_HANG_TIMEOUT (seconds, 0: off), when no iteration boundary came
  // for that long.
  int hang_signal = SIGUSR1;
  std::int64_t hang_timeout_ms = 0;
  // Online straggler scoring (lens/straggler.h): P_STRAGGLER_INTERVAL steps per window, 0: off.
  std::int64_t straggler_interval = 20;
  // Device time (docs/GPU.md): P_DEVICE_TIMING, and P_DEVICE_SPAN_GROUPS, a span-group spec of the groups timed on the
  // device (empty: those of forward_backward, microbatch, layer and communication that the catalogue has).
  DeviceTiming device_timing = DeviceTiming::kNone;
  std::string device_span_groups;
  std::string device_span_groups_source = "the default device span groups";

  // The catalogue span-group specs resolve against.
  Catalogue catalogue = base_catalogue();

  // Standard OpenTelemetry SDK variables.
  bool sdk_disabled = false;  // OTEL_SDK_DISABLED=true: every signal off, whatever else says
  TracesSampler traces_sampler = TracesSampler::kParentBasedAlwaysOn;
  double traces_sampler_ratio = 1.0;
  BatchConfig span_batch{5000, 30000, 2048, 512};
  BatchConfig log_batch{1000, 30000, 2048, 512};
  Limits limits;
  std::int64_t metric_export_interval_ms = 10000;
  std::int64_t metric_export_timeout_ms = 30000;
  Temporality metrics_temporality = Temporality::kCumulative;
  SignalExporter traces_exporter = SignalExporter::kFollow;
  SignalExporter metrics_exporter = SignalExporter::kFollow;
  SignalExporter logs_exporter = SignalExporter::kFollow;
  std::string prometheus_host = "localhost";
  int prometheus_port = 9464;
  std::string resource_attributes;  // OTEL_RESOURCE_ATTRIBUTES, raw; parsed with the resource
  // OTEL_PROPAGATORS (default tracecontext,baggage; `none`: neither). Without tracecontext, no span context
  // leaves the process (a worker bootstrap carries none). lens keeps no baggage: `baggage` is accepted, and
  // there is nothing to carry.
  bool propagate_trace_context = true;
  bool propagate_baggage = true;
  OtlpSignalConfig otlp_traces, otlp_metrics, otlp_logs;

  // True when telemetry is on: enabled and not OTEL_SDK_DISABLED.
  bool active() const noexcept { return enabled && !sdk_disabled; }
  bool hang_snapshots() const noexcept { return hang_signal != 0 || hang_timeout_ms > 0; }

#if !defined(LENS_DISABLED)
  // Reads every key from the process environment. Throws ConfigError on a bad value.
  LENS_API static Config from_env(std::string_view prefix, std::string_view fallback_prefix = kFallbackEnvPrefix,
                                  std::string_view default_service_name = "unknown_service",
                                  const Catalogue& catalogue = base_catalogue());

  // Command-line overrides, which beat the environment: `enabled` can only turn telemetry on; an empty (or
  // blank) service name or span-group spec means the flag was not given.
  LENS_API void apply_cli(bool otel_enabled, std::string_view otel_service_name = {},
                          std::string_view otel_span_groups = {});

  // A one-line human summary of the settings that decide what is exported. Header values are not shown.
  LENS_API std::string summary() const;
#else  // LENS_DISABLED: telemetry stays off, nothing is read.
  static Config from_env(std::string_view, std::string_view = {}, std::string_view = {}, const Catalogue& = {}) {
    return Config{};
  }
  void apply_cli(bool, std::string_view = {}, std::string_view = {}) {}
  std::string summary() const { return "lens compiled out (LENS_DISABLED)"; }
#endif
};

LENS_ABI_NAMESPACE_END

// Spelling of the enums as the variables accept them.
LENS_API std::string_view to_string(Exporter);
LENS_API std::string_view to_string(OtlpProtocol);
LENS_API std::string_view to_string(TracesSampler);

}  // namespace lens
