// Setting telemetry up from Python: its options, sinks that are Python callables, the handle.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "bindings.h"
#include "interpreter.h"
#include "lens/config.h"
#include "lens/resource.h"
#include "lens/telemetry.h"
#include "sdk_spans.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// A Python callable as a SetupOptions sink: called on lens's background thread with the GIL taken; what it raises
// is reported once on stderr (the sink's own failures are counted as failed exports either way).
std::function<bool(const std::string&)> json_sink(const py::object& callable) {
  if (callable.is_none()) return {};
  if (!PyCallable_Check(callable.ptr())) throw py::type_error("lens: an exporter sink is a callable");
  auto* kept = new py::object(callable);  // kept for the process's life: the pipeline may outlive the handle
  return [kept](const std::string& json) {
    if (interpreter_ending()) return false;  // a late batch after the interpreter ended
    py::gil_scoped_acquire gil;
    try {
      return py::bool_((*kept)(py::str(json))).cast<bool>();
    } catch (py::error_already_set& e) {
      static std::atomic<bool> told{false};
      if (!told.exchange(true))
        PySys_WriteStderr("lens: an exporter raised (counted as a failed export): %s\n", e.what());
      return false;
    }
  };
}

}  // namespace

lens::ResourceAttributes resource_from(const py::object& mapping) {
  lens::ResourceAttributes out;
  if (mapping.is_none()) return out;
  for (auto item : py::cast<py::dict>(mapping)) {
    std::string key = py::str(item.first);
    py::handle v = item.second;
    if (v.is_none()) continue;
    if (py::isinstance<py::bool_>(v))
      out.emplace_back(key, v.cast<bool>());
    else if (py::isinstance<py::int_>(v))
      out.emplace_back(key, v.cast<std::int64_t>());
    else if (py::isinstance<py::float_>(v))
      out.emplace_back(key, v.cast<double>());
    else
      out.emplace_back(key, std::string(py::str(v)));
  }
  return out;
}

void bind_setup(py::module_& m) {
  py::class_<lens::Telemetry>(m, "Telemetry")
      .def(py::init<>())
      .def_property_readonly("is_exporting", &lens::Telemetry::is_exporting)
      .def(
          "force_flush",
          [](lens::Telemetry& t, std::int64_t ms) { return t.force_flush(std::chrono::milliseconds(ms)); },
          py::arg("timeout_millis") = 5000, py::call_guard<py::gil_scoped_release>())
      .def(
          "shutdown", [](lens::Telemetry& t, std::int64_t ms) { return t.shutdown(std::chrono::milliseconds(ms)); },
          py::arg("timeout_millis") = 5000, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("run_id", &lens::Telemetry::run_id)
      .def_property_readonly("config", &lens::Telemetry::config)
      .def_property_readonly("rank", [](const lens::Telemetry& t) { return t.ranks().rank; })
      .def_property_readonly("world_size", [](const lens::Telemetry& t) { return t.ranks().world_size; })
      .def_property_readonly(
          "resolved_span_groups",
          [](const lens::Telemetry& t) { return group_names(t.config().catalogue, t.resolved_span_groups()); })
      .def("span_stats",
           [](const lens::Telemetry& t) {
             lens::SpanStats s = t.span_stats();
             py::dict d;
             d["produced"] = s.produced;
             d["exported"] = s.exported;
             d["queued"] = s.queued;
             d["dropped"] = s.dropped();
             d["dropped_queue_full"] = s.dropped_queue_full;
             d["dropped_no_slot"] = s.dropped_no_slot;
             d["dropped_after_shutdown"] = s.dropped_after_shutdown;
             d["dropped_export_failed"] = s.dropped_export_failed;
             d["rejected_by_collector"] = s.rejected_by_collector;
             d["sampled_out"] = s.sampled_out;
             return d;
           })
      .def("log_stats", [](const lens::Telemetry& t) {
        lens::LogStats s = t.log_stats();
        py::dict d;
        d["produced"] = s.produced;
        d["exported"] = s.exported;
        d["dropped"] = s.dropped();
        return d;
      });
  m.def(
      "setup",
      [](const lens::Config& config, std::optional<int> rank, std::optional<int> world_size,
         std::optional<int> local_rank, const py::object& resource, bool reinit, const py::object& span_sink,
         const py::object& metric_sink) {
        lens::SetupOptions o;
        o.span_batch_sink = sdk_span_sink(span_sink.ptr());
        o.metric_sink = json_sink(metric_sink);
        o.rank = rank;
        o.world_size = world_size;
        o.local_rank = local_rank;
        o.resource_attributes = resource_from(resource);
        o.reinit = reinit;
        lens::Telemetry t = lens::setup_telemetry(config, std::move(o));
        publish_group_ids(config.catalogue);
        return t;
      },
      py::arg("config"), py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("local_rank") = py::none(), py::arg("resource_attributes") = py::none(), py::arg("reinit") = false,
      py::arg("span_sink") = py::none(), py::arg("metric_sink") = py::none());
}

}  // namespace lens_python
