#include "lens/config.h"

#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <string>

#include "config/env.h"
#include "lens/megatron.h"
#include "lens/ranks.h"
#include "lens/sampling.h"
#include "lens/telemetry.h"

namespace lens {
namespace {

using Env = std::map<std::string, std::string>;

internal::EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

Config megatron_config(const Env& env) {
  return internal::config_from(lookup(env), "MEGATRON_OTEL", "NEMO_LENS", "megatron-lm", megatron::catalogue());
}

// The message of the ConfigError that setting up telemetry with `config` raises ("" when none), exporting nowhere.
std::string setup_error_of(Config config) {
  config.traces_exporter = config.metrics_exporter = config.logs_exporter = SignalExporter::kNone;
  try {
    Telemetry t = setup_telemetry(config);
    t.shutdown();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The message of the ConfigError that `env` raises ("" when none).
std::string error_of(const Env& env) {
  try {
    megatron_config(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ConfigDefaults, MatchTheSpec) {
  Config c = megatron_config({});
  EXPECT_FALSE(c.enabled);
  EXPECT_FALSE(c.active());
  EXPECT_EQ(c.service_name, "megatron-lm");
  EXPECT_EQ(c.span_groups, "default");
  EXPECT_EQ(c.rank_strategy, "single_rank");
  EXPECT_EQ(c.export_rank, -1);
  EXPECT_EQ(c.export_sample_rate, 1.0);
  EXPECT_EQ(c.sampling_strategy, "");
  EXPECT_TRUE(c.traces_enabled);
  EXPECT_TRUE(c.metrics_enabled);
  EXPECT_FALSE(c.logs_enabled);
  EXPECT_EQ(c.exporter, Exporter::kOtlp);
  EXPECT_EQ(c.file_dir, "./telemetry");
  EXPECT_EQ(c.traces_sampler, TracesSampler::kParentBasedAlwaysOn);
  EXPECT_EQ(c.metric_export_interval_ms, 10000);
  EXPECT_EQ(c.span_batch.schedule_delay_ms, 5000);
  EXPECT_EQ(c.span_batch.max_queue_size, 2048);
  EXPECT_EQ(c.span_batch.max_export_batch_size, 512);
  EXPECT_EQ(c.span_batch.export_timeout_ms, 30000);
  EXPECT_EQ(c.otlp_traces.protocol, OtlpProtocol::kGrpc);
  EXPECT_EQ(c.otlp_traces.timeout_ms, 10000);
  EXPECT_EQ(c.prometheus_host, "localhost");
  EXPECT_EQ(c.prometheus_port, 9464);
  EXPECT_EQ(c.catalogue.group_count(), 16u);
}

TEST(ConfigPrecedence, PrefixBeatsFallbackBeatsDefault) {
  EXPECT_EQ(megatron_config({{"NEMO_LENS_EXPORTER", "console"}}).exporter, Exporter::kConsole);
  EXPECT_EQ(megatron_config({{"NEMO_LENS_EXPORTER", "console"}, {"MEGATRON_OTEL_EXPORTER", "file"}}).exporter,
            Exporter::kFile);
}

TEST(ConfigPrecedence, NonEmptyPrimaryWinsEvenWhenZero) {
  Config c = megatron_config({{"MEGATRON_OTEL_ENABLED", "0"}, {"NEMO_LENS_ENABLED", "1"}});
  EXPECT_FALSE(c.enabled);
}

TEST(ConfigPrecedence, EmptyAndBlankMeanUnset) {
  Config c = megatron_config({{"MEGATRON_OTEL_ENABLED", "   "}, {"NEMO_LENS_ENABLED", "1"}});
  EXPECT_TRUE(c.enabled);
  c = megatron_config({{"MEGATRON_OTEL_SPAN_GROUPS", ""}});
  EXPECT_EQ(c.span_groups, "default");
}

TEST(ConfigPrecedence, ValuesAreTrimmed) {
  Config c = megatron_config({{"MEGATRON_OTEL_RUN_ID", "  run-7 \t"}, {"MEGATRON_OTEL_EXPORT_RANK", " 3 "}});
  EXPECT_EQ(c.run_id, "run-7");
  EXPECT_EQ(c.export_rank, 3);
}

TEST(ConfigPrecedence, CliBeatsEnvironment) {
  Config c = megatron_config({{"MEGATRON_OTEL_SPAN_GROUPS", "job"}, {"OTEL_SERVICE_NAME", "from-env"}});
  c.apply_cli(true, "from-flag", "per_step");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.service_name, "from-flag");
  EXPECT_EQ(c.span_groups, "per_step");
  EXPECT_EQ(c.span_groups_source, "--otel-span-groups");
}

TEST(ConfigPrecedence, CliEnabledCanOnlyTurnOnAndEmptyFlagsAreIgnored) {
  Config c = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_SPAN_GROUPS", "job"}});
  c.apply_cli(false, "", "  ");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.service_name, "megatron-lm");
  EXPECT_EQ(c.span_groups, "job");
  EXPECT_EQ(c.span_groups_source, "MEGATRON_OTEL_SPAN_GROUPS");
}

TEST(ConfigServiceName, OtelServiceNameElseConsumerDefault) {
  EXPECT_EQ(megatron_config({{"OTEL_SERVICE_NAME", " trainer "}}).service_name, "trainer");
  EXPECT_EQ(megatron_config({{"OTEL_SERVICE_NAME", ""}}).service_name, "megatron-lm");
  Config other = internal::config_from(lookup({}), "MY", "NEMO_LENS", "my-job", base_catalogue());
  EXPECT_EQ(other.service_name, "my-job");
}

TEST(ConfigBooleans, AcceptEveryDocumentedSpellingInAnyCase) {
  for (const char* yes : {"1", "true", "TRUE", "Yes", "on", "ON"})
    EXPECT_TRUE(megatron_config({{"MEGATRON_OTEL_ENABLED", yes}}).enabled) << yes;
  for (const char* no : {"0", "false", "False", "NO", "off"})
    EXPECT_FALSE(megatron_config({{"MEGATRON_OTEL_TRACES_ENABLED", no}}).traces_enabled) << no;
}

TEST(ConfigBooleans, AnythingElseIsAnErrorNamingVariableValueAndValidValues) {
  std::string m = error_of({{"MEGATRON_OTEL_ENABLED", "maybe"}});
  EXPECT_TRUE(contains(m, "MEGATRON_OTEL_ENABLED='maybe'")) << m;
  EXPECT_TRUE(contains(m, "1, true, yes, on, 0, false, no, off")) << m;
  EXPECT_TRUE(contains(error_of({{"NEMO_LENS_LOGS_ENABLED", "2"}}), "NEMO_LENS_LOGS_ENABLED='2'"));
}

TEST(ConfigNumbers, ExportRankAndRate) {
  Config c = megatron_config({{"MEGATRON_OTEL_EXPORT_RANK", "-1"}, {"MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "0.25"}});
  EXPECT_EQ(c.export_rank, -1);
  EXPECT_EQ(c.export_sample_rate, 0.25);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "0"}}).export_sample_rate, 0.0);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "1"}}).export_sample_rate, 1.0);
}

// The control endpoint's address is host:port, checked at setup.
TEST(ConfigControl, AMalformedAddressIsAnErrorNamingTheVariable) {
  for (const char* bad : {"localhost", ":8080", "127.0.0.1:port", "127.0.0.1:70000"}) {
    std::string m = error_of({{"MEGATRON_OTEL_CONTROL_ADDRESS", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_CONTROL_ADDRESS")) << bad << ": " << m;
  }
  EXPECT_TRUE(error_of({{"MEGATRON_OTEL_CONTROL", "maybe"}}).find("MEGATRON_OTEL_CONTROL") != std::string::npos);
}

TEST(ConfigHang, SignalAndTimeout) {
  const Config defaults = megatron_config({});
  EXPECT_EQ(defaults.hang_signal, SIGUSR1);
  EXPECT_EQ(defaults.hang_timeout_ms, 0);  // the watchdog is off by default
  EXPECT_TRUE(defaults.hang_snapshots());
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_HANG_SIGNAL", "SIGUSR2"}}).hang_signal, SIGUSR2);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_HANG_SIGNAL", "usr2"}}).hang_signal, SIGUSR2);
  const Config none = megatron_config({{"MEGATRON_OTEL_HANG_SIGNAL", "none"}});
  EXPECT_EQ(none.hang_signal, 0);
  EXPECT_FALSE(none.hang_snapshots());
  const Config watchdog =
      megatron_config({{"MEGATRON_OTEL_HANG_SIGNAL", "off"}, {"MEGATRON_OTEL_HANG_TIMEOUT", "2.5"}});
  EXPECT_EQ(watchdog.hang_timeout_ms, 2500);
  EXPECT_TRUE(watchdog.hang_snapshots());
  EXPECT_EQ(megatron_config({{"NEMO_LENS_HANG_TIMEOUT", "600"}}).hang_timeout_ms, 600000);
}

TEST(ConfigHang, BadValuesAreErrorsNamingTheVariable) {
  for (const char* bad : {"SIGTERM", "9", "SIGKILL", "usr3"}) {
    std::string m = error_of({{"MEGATRON_OTEL_HANG_SIGNAL", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_HANG_SIGNAL")) << bad << ": " << m;
    EXPECT_TRUE(contains(m, "sigusr1")) << m;
  }
  for (const char* bad : {"-1", "ten", "5m", "nan", "100000"}) {
    std::string m = error_of({{"MEGATRON_OTEL_HANG_TIMEOUT", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_HANG_TIMEOUT='" + std::string(bad) + "'")) << bad << ": " << m;
    EXPECT_TRUE(contains(m, "a number in [0, 86400]")) << m;
  }
  // A value is shown with its control bytes escaped: no escape sequence reaches the terminal.
  const std::string escaped = error_of({{"MEGATRON_OTEL_HANG_SIGNAL", "usr1\x1b[2J"}});
  EXPECT_TRUE(contains(escaped, "usr1\\x1b[2J")) << escaped;
  EXPECT_FALSE(contains(escaped, "\x1b")) << escaped;
  const std::string group = error_of({{"MEGATRON_OTEL_SPAN_GROUPS", "step,\x1b]0;x\x07"}});
  EXPECT_FALSE(contains(group, "\x1b")) << group;
  // 0.0004 s would round to 0 ms, which is off: refused, with the range.
  EXPECT_TRUE(contains(error_of({{"MEGATRON_OTEL_HANG_TIMEOUT", "0.0004"}}), "[0.001, 86400]"));
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_HANG_TIMEOUT", "0.001"}}).hang_timeout_ms, 1);
}

TEST(ConfigStraggler, IntervalIsStepsDefault20AndZeroIsOff) {
  EXPECT_EQ(megatron_config({}).straggler_interval, 20);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_STRAGGLER_INTERVAL", "0"}}).straggler_interval, 0);
  EXPECT_EQ(megatron_config({{"NEMO_LENS_STRAGGLER_INTERVAL", "50"}}).straggler_interval, 50);
}

TEST(ConfigStraggler, BadIntervalsAreErrorsNamingTheVariable) {
  for (const char* bad : {"-1", "ten", "2.5", "nan", "", "4", "1", "2000000"}) {
    if (std::string(bad).empty()) continue;
    const std::string m = error_of({{"MEGATRON_OTEL_STRAGGLER_INTERVAL", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_STRAGGLER_INTERVAL='" + std::string(bad) + "'")) << bad << ": " << m;
  }
  EXPECT_TRUE(contains(error_of({{"MEGATRON_OTEL_STRAGGLER_INTERVAL", "4"}}), "[5, 1000000]"));
}

TEST(ConfigDevice, TimingIsOffByDefaultCudaWhenAskedAndGroupsAreASpec) {
  EXPECT_EQ(megatron_config({}).device_timing, DeviceTiming::kNone);
  EXPECT_TRUE(megatron_config({}).device_span_groups.empty()) << "empty: the default set, resolved at setup";
  const Config c =
      megatron_config({{"MEGATRON_OTEL_DEVICE_TIMING", "CUDA"}, {"NEMO_LENS_DEVICE_SPAN_GROUPS", "layer"}});
  EXPECT_EQ(c.device_timing, DeviceTiming::kCuda);
  EXPECT_EQ(c.device_span_groups, "layer");
  EXPECT_EQ(c.device_span_groups_source, "NEMO_LENS_DEVICE_SPAN_GROUPS");
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_DEVICE_TIMING", "none"}}).device_timing, DeviceTiming::kNone);
}

TEST(ConfigDevice, AnUnknownTimingIsAnErrorNamingTheChoices) {
  const std::string m = error_of({{"MEGATRON_OTEL_DEVICE_TIMING", "gpu"}});
  EXPECT_TRUE(contains(m, "MEGATRON_OTEL_DEVICE_TIMING='gpu'")) << m;
  EXPECT_TRUE(contains(m, "cuda")) << m;
}

TEST(ConfigNumbers, BadValuesAreErrors) {
  for (const char* bad : {"1.5", "-0.1", "nan", "NaN", "inf", "half", "0.5x", ""}) {
    if (std::string(bad).empty()) continue;
    std::string m = error_of({{"MEGATRON_OTEL_EXPORT_SAMPLE_RATE", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_EXPORT_SAMPLE_RATE='" + std::string(bad) + "'")) << bad << ": " << m;
    EXPECT_TRUE(contains(m, "a number in [0, 1]")) << m;
  }
  for (const char* bad : {"last", "1.0", "3x", "99999999999"}) {
    std::string m = error_of({{"MEGATRON_OTEL_EXPORT_RANK", bad}});
    EXPECT_TRUE(contains(m, "MEGATRON_OTEL_EXPORT_RANK")) << bad << ": " << m;
    EXPECT_TRUE(contains(m, "an integer")) << m;
  }
}

// INT64_MAX in an interval wrote 62,446 metric lines in 4 s (the deadline overflowed): every duration is at most
// one day, and a larger one names the variable and the range.
TEST(ConfigNumbers, DurationsAreBoundedToOneDay) {
  for (const char* variable : {"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT", "OTEL_BSP_SCHEDULE_DELAY",
                               "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BLRP_SCHEDULE_DELAY", "OTEL_BLRP_EXPORT_TIMEOUT",
                               "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"}) {
    for (const char* bad : {"9223372036854775807", "86400001", "99999999999999999999", "-1"}) {
      std::string m = error_of({{variable, bad}});
      EXPECT_TRUE(contains(m, variable)) << variable << "=" << bad << ": " << m;
      EXPECT_TRUE(contains(m, "86400000] (one day)")) << m;
    }
    EXPECT_EQ(error_of({{variable, "86400000"}}), "") << variable;
  }
}

// OTEL_METRIC_EXPORT_INTERVAL below 100 ms (a collection and an export every millisecond) is a setup error.
TEST(ConfigNumbers, TheMetricExportIntervalIsAtLeast100Ms) {
  for (const char* bad : {"1", "99", "0"}) {
    std::string m = error_of({{"OTEL_METRIC_EXPORT_INTERVAL", bad}});
    EXPECT_TRUE(contains(m, "OTEL_METRIC_EXPORT_INTERVAL")) << m;
    EXPECT_TRUE(contains(m, "[100, 86400000]")) << m;
  }
  EXPECT_EQ(megatron_config({{"OTEL_METRIC_EXPORT_INTERVAL", "100"}}).metric_export_interval_ms, 100);
}

TEST(ConfigChoices, ExporterValuesAndErrors) {
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_EXPORTER", "OTLP"}}).exporter, Exporter::kOtlp);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_EXPORTER", "file"}}).exporter, Exporter::kFile);
  std::string m = error_of({{"MEGATRON_OTEL_EXPORTER", "jaeger"}});
  EXPECT_TRUE(contains(m, "MEGATRON_OTEL_EXPORTER='jaeger'")) << m;
  EXPECT_TRUE(contains(m, "otlp, console, file")) << m;
}

TEST(ConfigChoices, TraceLayout) {
  EXPECT_EQ(megatron_config({}).trace_layout, TraceLayout::kSegment);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_TRACE_LAYOUT", "Step"}}).trace_layout, TraceLayout::kStep);
  EXPECT_EQ(megatron_config({{"NEMO_LENS_TRACE_LAYOUT", "step"}}).trace_layout, TraceLayout::kStep);
  std::string m = error_of({{"MEGATRON_OTEL_TRACE_LAYOUT", "iteration"}});
  EXPECT_TRUE(contains(m, "MEGATRON_OTEL_TRACE_LAYOUT='iteration'")) << m;
  EXPECT_TRUE(contains(m, "segment, step")) << m;
}

// Under a trace-id ratio sampler each step is a trace of its own unless TRACE_LAYOUT says otherwise (CONTRACT §4).
TEST(ConfigChoices, ARatioSamplerMakesTheStepLayoutTheDefault) {
  for (const char* sampler : {"traceidratio", "parentbased_traceidratio"}) {
    EXPECT_EQ(megatron_config({{"OTEL_TRACES_SAMPLER", sampler}}).trace_layout, TraceLayout::kStep) << sampler;
    EXPECT_EQ(
        megatron_config({{"OTEL_TRACES_SAMPLER", sampler}, {"MEGATRON_OTEL_TRACE_LAYOUT", "segment"}}).trace_layout,
        TraceLayout::kSegment)
        << sampler;
  }
  for (const char* sampler : {"always_on", "parentbased_always_off"})
    EXPECT_EQ(megatron_config({{"OTEL_TRACES_SAMPLER", sampler}}).trace_layout, TraceLayout::kSegment) << sampler;
}

TEST(ConfigChoices, SpanNames) {
  EXPECT_EQ(megatron_config({}).span_names, SpanNaming::kDocumented);
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_SPAN_NAMES", "Megatron"}}).span_names, SpanNaming::kMegatron);
  std::string m = error_of({{"MEGATRON_OTEL_SPAN_NAMES", "nemo"}});
  EXPECT_TRUE(contains(m, "MEGATRON_OTEL_SPAN_NAMES='nemo'")) << m;
  EXPECT_TRUE(contains(m, "documented, megatron")) << m;
}

TEST(ConfigStrategies, RankStrategyAndItsAlias) {
  // Kept as written: the name is resolved where the strategy is chosen (setup), against what is registered by then.
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_RANK_STRATEGY", "All_Ranks"}}).rank_strategy, "All_Ranks");
  Config alias = megatron_config({{"MEGATRON_OTEL_EXPORT_STRATEGY", "sampled"}});
  EXPECT_EQ(alias.rank_strategy, "sampled");
  EXPECT_EQ(alias.rank_strategy_source, "MEGATRON_OTEL_EXPORT_STRATEGY");
  // The key beats its alias under one prefix; the primary prefix's alias beats the fallback's key.
  EXPECT_EQ(
      megatron_config({{"MEGATRON_OTEL_RANK_STRATEGY", "all_ranks"}, {"MEGATRON_OTEL_EXPORT_STRATEGY", "sampled"}})
          .rank_strategy,
      "all_ranks");
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_EXPORT_STRATEGY", "sampled"}, {"NEMO_LENS_RANK_STRATEGY", "all_ranks"}})
                .rank_strategy,
            "sampled");
}

// An unknown name is refused at setup, where the strategy is chosen, on every rank alike, naming the variable and the
// registered names; a strategy registered after the configuration was read but before setup is found.
TEST(ConfigStrategies, AStrategyIsResolvedAtSetupAgainstWhatIsRegisteredThen) {
  Config rank = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_RANK_STRATEGY", "every_rank"}});
  EXPECT_EQ(rank.rank_strategy, "every_rank");
  std::string m = setup_error_of(rank);
  EXPECT_TRUE(contains(m, "unknown rank strategy 'every_rank' from MEGATRON_OTEL_RANK_STRATEGY")) << m;
  EXPECT_TRUE(contains(m, "all_ranks, first_rank_per_node, sampled, single_rank")) << m;
  Config sampling = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_SAMPLING_STRATEGY", "by_rank"}});
  m = setup_error_of(sampling);
  EXPECT_TRUE(contains(m, "unknown sampling strategy 'by_rank' from MEGATRON_OTEL_SAMPLING_STRATEGY")) << m;
  EXPECT_TRUE(contains(m, "rank_aware")) << m;
  Config even = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_RANK_STRATEGY", "Even_Ranks"}});
  register_rank_strategy("Even_Ranks", [](const RankStrategyInput& in) { return in.ranks.rank % 2 == 0; });
  EXPECT_EQ(setup_error_of(even), "");
  unregister_rank_strategy("Even_Ranks");
  EXPECT_EQ(setup_error_of(megatron_config({{"MEGATRON_OTEL_ENABLED", "1"},
                                            {"MEGATRON_OTEL_RANK_STRATEGY", "All_Ranks"},
                                            {"MEGATRON_OTEL_SAMPLING_STRATEGY", "Rank_Aware"}})),
            "");  // a built-in in any case
}

TEST(ConfigStrategies, SamplerEnabledIsAnAliasOfRankAware) {
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_SAMPLER_ENABLED", "1"}}).sampling_strategy, "rank_aware");
  EXPECT_EQ(megatron_config({{"NEMO_LENS_SAMPLER_ENABLED", "yes"}}).sampling_strategy, "rank_aware");
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_SAMPLER_ENABLED", "0"}}).sampling_strategy, "");
  // The explicit key wins over the alias.
  register_sampling_strategy("mine", [](SamplingStrategyInput in) { return std::move(in.sdk_sampler); });
  EXPECT_EQ(megatron_config({{"MEGATRON_OTEL_SAMPLING_STRATEGY", "mine"}, {"MEGATRON_OTEL_SAMPLER_ENABLED", "1"}})
                .sampling_strategy,
            "mine");
  unregister_sampling_strategy("mine");
  EXPECT_TRUE(contains(error_of({{"MEGATRON_OTEL_SAMPLER_ENABLED", "sure"}}), "MEGATRON_OTEL_SAMPLER_ENABLED='sure'"));
}

TEST(ConfigSdk, SdkDisabledTurnsEverythingOffEvenTheFlag) {
  Config c = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"OTEL_SDK_DISABLED", "TRUE"}});
  c.apply_cli(true);
  EXPECT_TRUE(c.sdk_disabled);
  EXPECT_FALSE(c.active());
  EXPECT_FALSE(megatron_config({{"OTEL_SDK_DISABLED", "false"}}).sdk_disabled);
  EXPECT_TRUE(contains(error_of({{"OTEL_SDK_DISABLED", "1"}}), "OTEL_SDK_DISABLED='1'"));
}

TEST(ConfigSdk, Samplers) {
  Config c = megatron_config({{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "0.1"}});
  EXPECT_EQ(c.traces_sampler, TracesSampler::kParentBasedTraceIdRatio);
  EXPECT_DOUBLE_EQ(c.traces_sampler_ratio, 0.1);
  EXPECT_EQ(megatron_config({{"OTEL_TRACES_SAMPLER", "always_off"}}).traces_sampler, TracesSampler::kAlwaysOff);
  // The argument only matters to the ratio samplers.
  EXPECT_EQ(megatron_config({{"OTEL_TRACES_SAMPLER", "always_on"}, {"OTEL_TRACES_SAMPLER_ARG", "x"}}).traces_sampler,
            TracesSampler::kAlwaysOn);
  std::string m = error_of({{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "2"}});
  EXPECT_TRUE(contains(m, "OTEL_TRACES_SAMPLER_ARG='2'")) << m;
  m = error_of({{"OTEL_TRACES_SAMPLER", "jaeger_remote"}});
  EXPECT_TRUE(contains(m, "OTEL_TRACES_SAMPLER='jaeger_remote'")) << m;
  EXPECT_TRUE(contains(m, "parentbased_traceidratio")) << m;
}

TEST(ConfigSdk, BatchProcessors) {
  Config c = megatron_config({{"OTEL_BSP_SCHEDULE_DELAY", "200"},
                              {"OTEL_BSP_MAX_QUEUE_SIZE", "100"},
                              {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"},
                              {"OTEL_BSP_EXPORT_TIMEOUT", "1000"},
                              {"OTEL_BLRP_SCHEDULE_DELAY", "50"}});
  EXPECT_EQ(c.span_batch.schedule_delay_ms, 200);
  EXPECT_EQ(c.span_batch.max_queue_size, 100);
  EXPECT_EQ(c.span_batch.max_export_batch_size, 10);
  EXPECT_EQ(c.span_batch.export_timeout_ms, 1000);
  EXPECT_EQ(c.log_batch.schedule_delay_ms, 50);
  EXPECT_EQ(c.log_batch.max_queue_size, 2048);
  EXPECT_TRUE(contains(error_of({{"OTEL_BSP_MAX_QUEUE_SIZE", "0"}}), "OTEL_BSP_MAX_QUEUE_SIZE='0'"));
  EXPECT_TRUE(contains(error_of({{"OTEL_BSP_SCHEDULE_DELAY", "-5"}}), "OTEL_BSP_SCHEDULE_DELAY='-5'"));
  std::string m = error_of({{"OTEL_BSP_MAX_QUEUE_SIZE", "100"}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"}});
  EXPECT_TRUE(contains(m, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE='500'")) << m;
  EXPECT_TRUE(contains(m, "queue size 100")) << m;
}

TEST(ConfigSdk, LimitsSpecificBeatsGeneral) {
  Config c = megatron_config({{"OTEL_ATTRIBUTE_COUNT_LIMIT", "10"},
                              {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "20"},
                              {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64"},
                              {"OTEL_SPAN_EVENT_COUNT_LIMIT", "5"},
                              {"OTEL_SPAN_LINK_COUNT_LIMIT", "6"}});
  EXPECT_EQ(c.limits.span_attribute_count, 20);
  EXPECT_EQ(c.limits.event_attribute_count, 10);
  EXPECT_EQ(c.limits.link_attribute_count, 10);
  EXPECT_EQ(c.limits.log_attribute_count, 10);
  EXPECT_EQ(c.limits.span_attribute_value_length, 64);
  EXPECT_EQ(c.limits.span_event_count, 5);
  EXPECT_EQ(c.limits.span_link_count, 6);
  EXPECT_FALSE(megatron_config({}).limits.span_attribute_value_length.has_value());
  EXPECT_TRUE(contains(error_of({{"OTEL_SPAN_EVENT_COUNT_LIMIT", "lots"}}), "OTEL_SPAN_EVENT_COUNT_LIMIT='lots'"));
}

TEST(ConfigSdk, Metrics) {
  Config c = megatron_config({{"OTEL_METRIC_EXPORT_INTERVAL", "500"},
                              {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"},
                              {"OTEL_METRICS_EXPORTER", "prometheus"},
                              {"OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"},
                              {"OTEL_EXPORTER_PROMETHEUS_PORT", "9999"}});
  EXPECT_EQ(c.metric_export_interval_ms, 500);
  EXPECT_EQ(c.metrics_temporality, Temporality::kDelta);
  EXPECT_EQ(c.metrics_exporter, SignalExporter::kPrometheus);
  EXPECT_EQ(c.prometheus_host, "0.0.0.0");
  EXPECT_EQ(c.prometheus_port, 9999);
  EXPECT_TRUE(contains(error_of({{"OTEL_EXPORTER_PROMETHEUS_PORT", "70000"}}), "an integer in [1, 65535]"));
  EXPECT_TRUE(contains(error_of({{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "sometimes"}}),
                       "cumulative, delta, lowmemory"));
}

// OTEL_TRACES_EXPORTER and OTEL_LOGS_EXPORTER are read; an unknown value is an error, never ignored.
TEST(ConfigSdk, SignalExportersAreReadAndAnythingElseIsAnError) {
  Config unset = megatron_config({});
  EXPECT_EQ(unset.traces_exporter, SignalExporter::kFollow);
  EXPECT_EQ(unset.metrics_exporter, SignalExporter::kFollow);
  EXPECT_EQ(unset.logs_exporter, SignalExporter::kFollow);
  Config c = megatron_config(
      {{"OTEL_TRACES_EXPORTER", "none"}, {"OTEL_METRICS_EXPORTER", "Console"}, {"OTEL_LOGS_EXPORTER", " otlp "}});
  EXPECT_EQ(c.traces_exporter, SignalExporter::kNone);
  EXPECT_EQ(c.metrics_exporter, SignalExporter::kConsole);
  EXPECT_EQ(c.logs_exporter, SignalExporter::kOtlp);
  for (const char* variable : {"OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER"}) {
    for (const char* value : {"zipkin", "otlp,console", "prometheus"}) {
      std::string m = error_of({{variable, value}});
      EXPECT_TRUE(contains(m, std::string(variable) + "='" + value + "'")) << m;
      EXPECT_TRUE(contains(m, "otlp, console, none")) << m;
    }
  }
  std::string m = error_of({{"OTEL_METRICS_EXPORTER", "statsd"}});
  EXPECT_TRUE(contains(m, "otlp, prometheus, console, none")) << m;
}

// OTEL_PROPAGATORS is read: b3, which lens does not have, is an error rather than a propagator silently missing.
TEST(ConfigSdk, PropagatorsAreReadAndAnUnknownOneIsAnError) {
  Config unset = megatron_config({});
  EXPECT_TRUE(unset.propagate_trace_context);
  EXPECT_TRUE(unset.propagate_baggage);
  Config none = megatron_config({{"OTEL_PROPAGATORS", "none"}});
  EXPECT_FALSE(none.propagate_trace_context);
  EXPECT_FALSE(none.propagate_baggage);
  Config baggage = megatron_config({{"OTEL_PROPAGATORS", " Baggage "}});
  EXPECT_FALSE(baggage.propagate_trace_context);
  EXPECT_TRUE(baggage.propagate_baggage);
  EXPECT_TRUE(megatron_config({{"OTEL_PROPAGATORS", "tracecontext,baggage"}}).propagate_trace_context);
  std::string m = error_of({{"OTEL_PROPAGATORS", "tracecontext,b3"}});
  EXPECT_TRUE(contains(m, "OTEL_PROPAGATORS='tracecontext,b3': unknown propagator 'b3'")) << m;
  EXPECT_TRUE(contains(m, "tracecontext, baggage, none")) << m;
}

TEST(ConfigOtlp, PerSignalBeatsGeneral) {
  Config c = megatron_config({{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
                              {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"},
                              {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"},
                              {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4318/custom"},
                              {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
                              {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
                              {"OTEL_EXPORTER_OTLP_LOGS_INSECURE", "true"}});
  EXPECT_EQ(c.otlp_traces.protocol, OtlpProtocol::kHttpJson);
  EXPECT_EQ(c.otlp_metrics.protocol, OtlpProtocol::kHttpProtobuf);
  EXPECT_EQ(c.otlp_traces.endpoint, "http://collector:4318");
  EXPECT_FALSE(c.otlp_traces.endpoint_is_per_signal);
  EXPECT_EQ(c.otlp_metrics.endpoint, "http://m:4318/custom");
  EXPECT_TRUE(c.otlp_metrics.endpoint_is_per_signal);
  EXPECT_EQ(c.otlp_logs.timeout_ms, 2500);
  EXPECT_EQ(c.otlp_traces.compression, Compression::kGzip);
  EXPECT_TRUE(c.otlp_logs.insecure);
  EXPECT_FALSE(c.otlp_traces.insecure);
  EXPECT_TRUE(contains(error_of({{"OTEL_EXPORTER_OTLP_PROTOCOL", "http"}}), "grpc, http/protobuf, http/json"));
  EXPECT_TRUE(contains(error_of({{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}}), "gzip, none"));
}

// A token in the endpoint is never printed with a warning nor handed to gRPC's resolver.
TEST(ConfigOtlp, AnEndpointWithCredentialsOrAFragmentIsRefusedWithoutShowingIt) {
  for (const char* url : {"http://apikey:TOKEN@collector:4317", "https://TOKEN@collector:4318/v1/traces",
                          "http://collector:4317#TOKEN", "collector:4317#TOKEN"}) {
    const std::string m = error_of({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url}});
    EXPECT_TRUE(contains(m, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=<value hidden> is invalid")) << m;
    EXPECT_TRUE(contains(m, "OTEL_EXPORTER_OTLP_HEADERS")) << m;
    EXPECT_FALSE(contains(m, "TOKEN")) << m;
  }
  EXPECT_TRUE(contains(error_of({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318\r\nX: 1"}}),
                       "without spaces or control bytes"));
  // An '@' in the path or the query is not userinfo.
  EXPECT_EQ(megatron_config({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/a@b"}}).otlp_traces.endpoint,
            "http://collector:4318/a@b");
}

TEST(ConfigOtlp, HeadersArePercentDecoded) {
  Config c = megatron_config({{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cret, x-team = ml ,"},
                              {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=k%3Dv"}});
  ASSERT_EQ(c.otlp_metrics.headers.size(), 2u);
  EXPECT_EQ(c.otlp_metrics.headers[0], (std::pair<std::string, std::string>{"Authorization", "Bearer s3cret"}));
  EXPECT_EQ(c.otlp_metrics.headers[1], (std::pair<std::string, std::string>{"x-team", "ml"}));
  ASSERT_EQ(c.otlp_traces.headers.size(), 1u);
  EXPECT_EQ(c.otlp_traces.headers[0].second, "k=v");
}

TEST(ConfigOtlp, HeaderTokensNeverAppearInMessagesOrSummary) {
  const std::string token = "tok_9f8e7d6c";
  for (const std::string& bad : {"Authorization " + token, "Authorization=" + token + "%zz", "=" + token}) {
    std::string m = error_of({{"OTEL_EXPORTER_OTLP_HEADERS", bad}});
    ASSERT_FALSE(m.empty()) << "no error for a malformed header list";
    EXPECT_TRUE(contains(m, "OTEL_EXPORTER_OTLP_HEADERS")) << m;
    EXPECT_TRUE(contains(m, "entry 1")) << m;
    EXPECT_FALSE(contains(m, token)) << m;
  }
  Config c = megatron_config({{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer " + token}});
  EXPECT_FALSE(contains(c.summary(), token)) << c.summary();
  EXPECT_TRUE(contains(c.summary(), "1 headers")) << c.summary();
}

TEST(ConfigSummary, SaysWhatDecidesTheExport) {
  Config c = megatron_config({{"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_EXPORTER", "file"}});
  std::string s = c.summary();
  EXPECT_TRUE(contains(s, "enabled=1")) << s;
  EXPECT_TRUE(contains(s, "exporter=file file_dir=./telemetry")) << s;
  EXPECT_TRUE(contains(s, "service=megatron-lm")) << s;
  EXPECT_TRUE(contains(s, "signals=TM-")) << s;
  // A signal sent elsewhere or nowhere, and the trace shape, are said too.
  s = megatron_config({{"MEGATRON_OTEL_EXPORTER", "file"},
                       {"OTEL_TRACES_EXPORTER", "none"},
                       {"OTEL_METRICS_EXPORTER", "console"},
                       {"MEGATRON_OTEL_TRACE_LAYOUT", "step"}})
          .summary();
  EXPECT_TRUE(contains(s, "metrics_exporter=console")) << s;
  EXPECT_TRUE(contains(s, "trace_layout=step")) << s;
  EXPECT_TRUE(contains(s, "signals=-M-")) << s;
}

TEST(ConfigFromEnv, ReadsTheProcessEnvironment) {
  ::setenv("LENSTEST_ENABLED", "1", 1);
  ::setenv("LENSTEST_SPAN_GROUPS", "step", 1);
  Config c = Config::from_env("LENSTEST", "NEMO_LENS", "svc");
  ::unsetenv("LENSTEST_ENABLED");
  ::unsetenv("LENSTEST_SPAN_GROUPS");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.span_groups, "step");
  EXPECT_EQ(c.span_groups_source, "LENSTEST_SPAN_GROUPS");
}

}  // namespace
}  // namespace lens
