// lens.Config: every field, its enums spelled as the environment spells them.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "enum_names.h"
#include "lens/config.h"
#include "lens/groups.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// A rate or ratio set from Python: a number in [0, 1]. NaN passed as set, and every comparison with it failed: at
// export_sample_rate = nan no rank exported, and nothing said why.
double rate_in_unit_interval(double value, const char* name) {
  if (!(value >= 0.0 && value <= 1.0)) {
    char text[96];
    std::snprintf(text, sizeof text, "%s must be in [0.0, 1.0], got %g", name, value);
    throw lens::ConfigError(text);
  }
  return value;
}

}  // namespace

void bind_configuration(py::module_& m) {
  py::class_<lens::Config>(m, "Config", py::dynamic_attr())
      .def(py::init<>())
      .def("_load_env",
           [](lens::Config& c, const std::string& prefix, const std::string& fallback,
              const std::string& default_service_name, const std::vector<std::string>& groups,
              const PresetList& presets) {
             c = lens::Config::from_env(prefix, fallback, default_service_name, make_catalogue(groups, presets));
           })
      .def("_use_catalogue", [](lens::Config& c, const std::vector<std::string>& groups,
                                const PresetList& presets) { c.catalogue = make_catalogue(groups, presets); })
      .def("_copy", [](const lens::Config& c, lens::Config& into) { into = c; })
      .def("apply_cli", &lens::Config::apply_cli, py::arg("otel_enabled"), py::arg("otel_service_name") = "",
           py::arg("otel_span_groups") = "")
      .def("summary", &lens::Config::summary)
      .def_property_readonly("active", &lens::Config::active)
      .def_property_readonly("catalogue_groups",
                             [](const lens::Config& c) { return group_names(c.catalogue, c.catalogue.all()); })
      .def_readwrite("enabled", &lens::Config::enabled)
      .def_readwrite("service_name", &lens::Config::service_name)
      .def_readwrite("span_groups", &lens::Config::span_groups)
      .def_readwrite("span_groups_source", &lens::Config::span_groups_source)
      .def_readwrite("rank_strategy", &lens::Config::rank_strategy)
      .def_readwrite("export_rank", &lens::Config::export_rank)
      .def_property(
          "export_sample_rate", [](const lens::Config& c) { return c.export_sample_rate; },
          [](lens::Config& c, double rate) {
            c.export_sample_rate = rate_in_unit_interval(rate, "export_sample_rate");
          })
      .def_readwrite("sampling_strategy", &lens::Config::sampling_strategy)
      .def_readwrite("traces_enabled", &lens::Config::traces_enabled)
      .def_readwrite("metrics_enabled", &lens::Config::metrics_enabled)
      .def_readwrite("logs_enabled", &lens::Config::logs_enabled)
      .def_readwrite("file_dir", &lens::Config::file_dir)
      .def_readwrite("run_id", &lens::Config::run_id)
      .def_readwrite("user_id", &lens::Config::user_id)
      .def_readwrite("sdk_disabled", &lens::Config::sdk_disabled)
      .def_property(
          "traces_sampler_ratio", [](const lens::Config& c) { return c.traces_sampler_ratio; },
          [](lens::Config& c, double ratio) {
            c.traces_sampler_ratio = rate_in_unit_interval(ratio, "traces_sampler_ratio");
          })
      .def_readwrite("metric_export_interval_ms", &lens::Config::metric_export_interval_ms)
      .def_readwrite("metric_export_timeout_ms", &lens::Config::metric_export_timeout_ms)
      .def_readwrite("resource_attributes", &lens::Config::resource_attributes)
      .def_readwrite("propagate_trace_context", &lens::Config::propagate_trace_context)
      .def_readwrite("prometheus_host", &lens::Config::prometheus_host)
      .def_readwrite("prometheus_port", &lens::Config::prometheus_port)
      .def_readwrite("straggler_interval", &lens::Config::straggler_interval)
      .def_readwrite("device_span_groups", &lens::Config::device_span_groups)
      .def_property(
          "device_timing", [](const lens::Config& c) { return name_of(c.device_timing, kDeviceTimings); },
          [](lens::Config& c, const std::string& v) {
            c.device_timing = parse_enum(v, kDeviceTimings, "device_timing");
          })
      .def_property_readonly("traces_sampler",
                             [](const lens::Config& c) { return std::string(lens::to_string(c.traces_sampler)); })
      .def_property_readonly("otlp_traces_endpoint", [](const lens::Config& c) { return c.otlp_traces.endpoint; })
      .def_property_readonly("otlp_traces_protocol",
                             [](const lens::Config& c) { return std::string(lens::to_string(c.otlp_traces.protocol)); })
      .def_property_readonly("span_batch",
                             [](const lens::Config& c) {
                               return py::make_tuple(c.span_batch.schedule_delay_ms, c.span_batch.export_timeout_ms,
                                                     c.span_batch.max_queue_size, c.span_batch.max_export_batch_size);
                             })
      .def_property(
          "exporter", [](const lens::Config& c) { return name_of(c.exporter, kExporters); },
          [](lens::Config& c, const std::string& v) { c.exporter = parse_enum(v, kExporters, "exporter"); })
      .def_property(
          "trace_layout", [](const lens::Config& c) { return name_of(c.trace_layout, kLayouts); },
          [](lens::Config& c, const std::string& v) { c.trace_layout = parse_enum(v, kLayouts, "trace_layout"); })
      .def_property(
          "span_names", [](const lens::Config& c) { return name_of(c.span_names, kNamings); },
          [](lens::Config& c, const std::string& v) { c.span_names = parse_enum(v, kNamings, "span_names"); })
      .def_property(
          "min_log_severity", [](const lens::Config& c) { return name_of(c.min_log_severity, kSeverities); },
          [](lens::Config& c, const std::string& v) {
            c.min_log_severity = parse_enum(v, kSeverities, "min_log_severity");
          })
      .def_property(
          "metrics_temporality", [](const lens::Config& c) { return name_of(c.metrics_temporality, kTemporalities); },
          [](lens::Config& c, const std::string& v) {
            c.metrics_temporality = parse_enum(v, kTemporalities, "metrics_temporality");
          })
      .def_property_readonly("traces_exporter",
                             [](const lens::Config& c) { return name_of(c.traces_exporter, kSignalExporters); })
      .def_property_readonly("metrics_exporter",
                             [](const lens::Config& c) { return name_of(c.metrics_exporter, kSignalExporters); })
      .def_property_readonly("logs_exporter",
                             [](const lens::Config& c) { return name_of(c.logs_exporter, kSignalExporters); });
}

}  // namespace lens_python
