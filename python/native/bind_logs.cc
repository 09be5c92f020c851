// Log records from Python.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <string>

#include "attributes.h"
#include "bindings.h"
#include "lens/log.h"

namespace py = pybind11;

namespace lens_python {

void bind_logs(py::module_& m) {
  m.def("should_log",
        [](int severity) { return severity >= lens::internal::g_min_log_severity.load(std::memory_order_relaxed); });
  m.def(
      "emit_log",
      [](int severity, const std::string& severity_text, const std::string& body, const py::object& attributes,
         std::int64_t time_ns) {
        AttributeBuffer buffer;
        buffer.add_dict(attributes.ptr());
        auto time = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(time_ns)));
        lens::internal::emit_log(severity, severity_text, body, buffer.attributes(), time);
      },
      py::arg("severity"), py::arg("severity_text"), py::arg("body"), py::arg("attributes"), py::arg("time_ns"));
}

}  // namespace lens_python
