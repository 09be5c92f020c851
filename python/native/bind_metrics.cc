// Metric instruments from Python.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attributes.h"
#include "bindings.h"
#include "lens/megatron.h"
#include "lens/metrics.h"

namespace py = pybind11;

namespace lens_python {

namespace {

struct PyInstrument {
  lens::internal::Instrument* instrument;
  lens::InstrumentKind kind;
  std::string name;

  void measure(double value, const py::object& attributes) const {
    if (!lens::internal::recording()) return;
    if (kind == lens::InstrumentKind::kCounter && value < 0) return;  // a counter only goes up
    const auto iv = static_cast<std::int64_t>(value);
    if (attributes.is_none()) {
      if (kind == lens::InstrumentKind::kCounter || kind == lens::InstrumentKind::kUpDownCounter)
        lens::internal::add(instrument, value);
      else
        lens::internal::record(instrument, value);
      return;
    }
    AttributeBuffer buffer;
    buffer.add_dict(attributes.ptr());
    lens::internal::add(instrument, value, iv, std::span<const lens::Attribute>(buffer.attributes()));
  }
};

}  // namespace

void bind_metrics(py::module_& m) {
  py::enum_<lens::InstrumentKind>(m, "InstrumentKind")
      .value("COUNTER", lens::InstrumentKind::kCounter)
      .value("UP_DOWN_COUNTER", lens::InstrumentKind::kUpDownCounter)
      .value("HISTOGRAM", lens::InstrumentKind::kHistogram)
      .value("GAUGE", lens::InstrumentKind::kGauge);
  py::class_<PyInstrument>(m, "Instrument")
      .def_readonly("name", &PyInstrument::name)
      .def("_measure", &PyInstrument::measure, py::arg("amount"), py::arg("attributes") = py::none());
  m.def(
      "instrument",
      [](lens::InstrumentKind kind, const std::string& name, const std::string& unit, const std::string& description,
         std::optional<std::vector<double>> bounds) {
        static std::deque<std::vector<double>> kept_bounds;  // an instrument keeps a view of its bounds
        std::span<const double> b = lens::metrics::kDefaultBounds;
        if (bounds) b = kept_bounds.emplace_back(*bounds);
        try {
          return PyInstrument{lens::internal::find_or_create_instrument(
                                  name, unit, description, kind, false,
                                  kind == lens::InstrumentKind::kHistogram ? b : std::span<const double>{}),
                              kind, name};
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("kind"), py::arg("name"), py::arg("unit") = "", py::arg("description") = "",
      py::arg("bounds") = py::none());
  m.def("record_training_metrics", [](const py::dict& values) {
    lens::megatron::TrainingMetrics t;
    auto take = [&](const char* key, auto& field) {
      if (values.contains(key) && !values[key].is_none())
        field = values[key].cast<typename std::decay_t<decltype(field)>::value_type>();
    };
    take("step_duration_ms", t.step_duration_ms);
    take("loss", t.loss);
    take("throughput_tflops", t.throughput_tflops);
    take("grad_norm", t.grad_norm);
    take("skipped_iters", t.skipped_iters);
    take("learning_rate", t.learning_rate);
    take("tokens_per_sec", t.tokens_per_sec);
    take("memory_allocated_gb", t.memory_allocated_gb);
    take("mfu", t.mfu);
    lens::megatron::record_training_metrics(t);
  });
  m.def(
      "peak_tflops",
      [](const std::string& device_name, bool half_precision) {
        return lens::megatron::peak_tflops(device_name, half_precision);
      },
      py::arg("device_name"), py::arg("half_precision") = true,
      "A GPU's peak dense BF16/FP16 TFLOP/s by NVML's device name (docs/GPU.md), or None.");
}

}  // namespace lens_python
