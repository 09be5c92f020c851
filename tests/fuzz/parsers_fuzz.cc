#include "parsers_fuzz.h"

#include <map>
#include <optional>

#include "common/text.h"
#include "config/env.h"
#include "export/json_lines_exporter.h"
#include "export/otlp_channel.h"
#include "lens/context.h"
#include "lens/megatron.h"
#include "lens/worker.h"
#include "resource/resource.h"

namespace lens::fuzz {

namespace {

// Runs `parse`: a ConfigError is an answer; another exception, or a broken promise it reports, is not.
template <typename Parse>
std::string value_or_config_error(const std::string& input, Parse&& parse) {
  try {
    return parse();
  } catch (const ConfigError&) {
    return "";
  } catch (const std::exception& e) {
    return std::string("threw ") + e.what() + " for input of " + std::to_string(input.size()) +
           " bytes: " + internal::printable_excerpt(input);
  }
}

}  // namespace

const std::vector<std::string>& configuration_variables() {
  static const std::vector<std::string> variables = {"MEGATRON_OTEL_ENABLED",
                                                     "MEGATRON_OTEL_SPAN_GROUPS",
                                                     "MEGATRON_OTEL_RANK_STRATEGY",
                                                     "MEGATRON_OTEL_EXPORT_RANK",
                                                     "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
                                                     "MEGATRON_OTEL_SAMPLING_STRATEGY",
                                                     "MEGATRON_OTEL_EXPORTER",
                                                     "NEMO_LENS_TRACES_ENABLED",
                                                     "OTEL_SDK_DISABLED",
                                                     "OTEL_TRACES_SAMPLER",
                                                     "OTEL_BSP_SCHEDULE_DELAY",
                                                     "OTEL_BSP_MAX_QUEUE_SIZE",
                                                     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                                                     "OTEL_BLRP_EXPORT_TIMEOUT",
                                                     "OTEL_METRIC_EXPORT_INTERVAL",
                                                     "OTEL_EXPORTER_OTLP_PROTOCOL",
                                                     "OTEL_EXPORTER_OTLP_HEADERS",
                                                     "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                                                     "OTEL_EXPORTER_OTLP_TIMEOUT",
                                                     "OTEL_EXPORTER_OTLP_COMPRESSION",
                                                     "OTEL_EXPORTER_OTLP_INSECURE",
                                                     "OTEL_EXPORTER_PROMETHEUS_PORT",
                                                     "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                                                     "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
                                                     "OTEL_METRICS_EXPORTER",
                                                     "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"};
  return variables;
}

std::string configuration(const std::string& variable, const std::string& value, const std::string& sampler_arg) {
  const std::map<std::string, std::string> env = {{variable, value}, {"OTEL_TRACES_SAMPLER_ARG", sampler_arg}};
  return value_or_config_error(value, [&] {
    internal::config_from(
        [&](const std::string& name) -> std::optional<std::string> {
          auto it = env.find(name);
          return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        "MEGATRON_OTEL", "NEMO_LENS", "megatron-lm", megatron::catalogue());
    return std::string();
  });
}

std::string otlp_headers(const std::string& text) {
  return value_or_config_error(text, [&] {
    OtlpSignalConfig settings;
    settings.headers = internal::parse_headers(internal::EnvValue{text, "OTEL_EXPORTER_OTLP_HEADERS", true});
    for (OtlpProtocol p : {OtlpProtocol::kGrpc, OtlpProtocol::kHttpProtobuf}) {
      settings.protocol = p;
      internal::check_otlp_headers(settings, internal::kOtlpTraces);
    }
    return std::string();
  });
}

std::string context_run_id_and_text(const std::string& text) {
  if (auto context = from_traceparent(text); context && !context->is_valid())
    return "traceparent gave an invalid context: " + internal::printable_excerpt(text);
  (void)normalize_tracestate(text);
  (void)internal::percent_decode(text);
  (void)internal::redact_url(text);
  if (internal::printable_excerpt(text).size() > 256u * 4 + 3) return "printable_excerpt past its bound";
  BinaryContext binary{};
  for (std::size_t b = 0; b < binary.size(); ++b)
    binary[b] = static_cast<std::uint8_t>(text.empty() ? b : text[b % text.size()]);
  if (auto context = from_binary(binary); context && !context->is_valid()) return "binary context invalid";
  return value_or_config_error(text, [&] {
    const std::string name = internal::run_directory_name(text);
    if (name.find('/') != std::string::npos || name == ".." || name == ".")
      return "run id made an unsafe directory name: " + internal::printable_excerpt(name);
    return std::string();
  });
}

std::string worker_bootstrap(const std::string& text) {
  return value_or_config_error(text, [&] {
    (void)WorkerBootstrap::parse(text);
    return std::string();
  });
}

const std::vector<std::string>& resource_variables() {
  static const std::vector<std::string> variables = {"CUDA_VISIBLE_DEVICES",
                                                     "SLURM_JOB_ID",
                                                     "SLURM_NNODES",
                                                     "SLURM_NTASKS",
                                                     "SLURM_NODELIST",
                                                     "SLURM_PROCID",
                                                     "SLURM_RESTART_COUNT",
                                                     "TORCHELASTIC_RUN_ID",
                                                     "TORCHELASTIC_RESTART_COUNT",
                                                     "KUBERNETES_SERVICE_HOST",
                                                     "K8S_POD_NAME",
                                                     "OTEL_RESOURCE_ATTRIBUTES",
                                                     "OTEL_SERVICE_NAME",
                                                     "WANDB_PROJECT",
                                                     "DEPLOYMENT_ENV"};
  return variables;
}

std::string resource_detection(const std::string& variable, const std::string& value) {
  const auto env = [&](const std::string& name) -> std::optional<std::string> {
    if (name == variable) return value;
    if (name == "KUBERNETES_SERVICE_HOST" || name == "SLURM_JOB_ID") return std::string("set");  // their keys read
    return std::nullopt;
  };
  try {
    for (int local_rank = 0; local_rank < 4; ++local_rank) {
      const std::optional<int> index = internal::gpu_index_for(env, local_rank);
      if (index && *index < 0) return "a negative GPU index from " + internal::printable_excerpt(value);
    }
    (void)internal::run_uuids_from(env);
    internal::Resource resource = internal::build_resource(Config{}, RankInfo{1, 4, 1}, "run", {}, env);
    if (resource.attributes.empty()) return "an empty resource";
  } catch (const std::exception& e) {
    return std::string("threw ") + e.what() + " for " + variable + "=" + internal::printable_excerpt(value);
  }
  return "";
}

}  // namespace lens::fuzz
