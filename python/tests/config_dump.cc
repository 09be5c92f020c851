// The C++ side of the Python configuration parity test: reads the environment as a C++ trainer would and prints
// the fields, the resolved span groups, or the error, as JSON. Usage: lens_config_dump base|megatron PREFIX FALLBACK
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "lens/config.h"
#include "lens/groups.h"
#include "lens/megatron.h"

namespace {

const char* exporter_name(lens::SignalExporter e) {
  switch (e) {
    case lens::SignalExporter::kFollow: return "";
    case lens::SignalExporter::kOtlp: return "otlp";
    case lens::SignalExporter::kConsole: return "console";
    case lens::SignalExporter::kNone: return "none";
    case lens::SignalExporter::kPrometheus: return "prometheus";
  }
  return "?";
}

nlohmann::json fields(const lens::Config& c) {
  nlohmann::json j;
  j["enabled"] = c.enabled;
  j["service_name"] = c.service_name;
  j["span_groups"] = c.span_groups;
  j["span_groups_source"] = c.span_groups_source;
  j["rank_strategy"] = c.rank_strategy;
  j["export_rank"] = c.export_rank;
  j["export_sample_rate"] = c.export_sample_rate;
  j["sampling_strategy"] = c.sampling_strategy;
  j["traces_enabled"] = c.traces_enabled;
  j["metrics_enabled"] = c.metrics_enabled;
  j["logs_enabled"] = c.logs_enabled;
  j["exporter"] = std::string(lens::to_string(c.exporter));
  j["file_dir"] = c.file_dir;
  j["trace_layout"] = c.trace_layout == lens::TraceLayout::kStep ? "step" : "segment";
  j["span_names"] = c.span_names == lens::SpanNaming::kMegatron ? "megatron" : "documented";
  j["run_id"] = c.run_id;
  j["user_id"] = c.user_id;
  j["sdk_disabled"] = c.sdk_disabled;
  j["traces_sampler"] = std::string(lens::to_string(c.traces_sampler));
  j["traces_sampler_ratio"] = c.traces_sampler_ratio;
  j["metric_export_interval_ms"] = c.metric_export_interval_ms;
  j["traces_exporter"] = exporter_name(c.traces_exporter);
  j["metrics_exporter"] = exporter_name(c.metrics_exporter);
  j["logs_exporter"] = exporter_name(c.logs_exporter);
  j["prometheus_host"] = c.prometheus_host;
  j["prometheus_port"] = c.prometheus_port;
  j["propagate_trace_context"] = c.propagate_trace_context;
  j["otlp_traces_endpoint"] = c.otlp_traces.endpoint;
  j["otlp_traces_protocol"] = std::string(lens::to_string(c.otlp_traces.protocol));
  j["span_batch"] = {c.span_batch.schedule_delay_ms, c.span_batch.export_timeout_ms, c.span_batch.max_queue_size,
                     c.span_batch.max_export_batch_size};
  j["resource_attributes"] = c.resource_attributes;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: lens_config_dump base|megatron PREFIX FALLBACK\n";
    return 2;
  }
  const std::string mode = argv[1];
  nlohmann::json out;
  try {
    // NemoLensConfig.from_env's default service name is NeMo Lens's, "nemo" (C++'s own default is OpenTelemetry's).
    lens::Config c =
        mode == "megatron" ? lens::megatron::config_from_env() : lens::Config::from_env(argv[2], argv[3], "nemo");
    out["fields"] = fields(c);
    try {
      out["resolved"] = lens::describe(c.catalogue, lens::resolve(c.catalogue, c.span_groups, c.span_groups_source));
    } catch (const lens::ConfigError& e) {
      out["resolve_error"] = e.what();
    }
  } catch (const lens::ConfigError& e) {
    out["error"] = e.what();
  }
  std::cout << out.dump() << "\n";
  return 0;
}
