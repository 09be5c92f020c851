// SpanContext as Python sees it (ids as ints, traceparent, the current context), and the conversions the
// hand-written span path uses (context_conversion.h).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bindings.h"
#include "context_conversion.h"
#include "ids.h"
#include "lens/context.h"
#include "lens/span.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// OpenTelemetry's SpanContext (or anything with its trace_id, span_id, trace_flags and is_remote) as lens's.
bool context_of_otel_shape(PyObject* object, lens::SpanContext* out) {
  py::handle o(object);
  if (!py::hasattr(o, "trace_id") || !py::hasattr(o, "span_id") || !py::hasattr(o, "trace_flags")) return false;
  py::object trace_id = o.attr("trace_id"), span_id = o.attr("span_id");
  if (!id_of_int(trace_id.ptr(), out->trace_id.bytes.data(), 16) ||
      !id_of_int(span_id.ptr(), out->span_id.bytes.data(), 8)) {
    PyErr_Clear();
    return false;
  }
  out->trace_flags = static_cast<std::uint8_t>(py::int_(o.attr("trace_flags")).cast<unsigned>() & 0xFFU);
  out->is_remote = py::hasattr(o, "is_remote") && py::bool_(o.attr("is_remote"));
  return true;
}

}  // namespace

PyObject* context_to_python(const lens::SpanContext& context) {
  try {
    return py::cast(context).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
}

bool context_from_python(PyObject* object, lens::SpanContext* out) {
  // None (what extract() gives for a header it cannot read) is a reference pybind11 cannot bind: it throws
  // reference_cast_error, which is not a cast_error. Every failure here is the caller's TypeError, never an
  // exception out of a C function (std::terminate).
  try {
    if (object != Py_None) {
      if (py::isinstance<lens::SpanContext>(py::handle(object))) {
        *out = py::cast<lens::SpanContext>(py::handle(object));
        return true;
      }
      if (context_of_otel_shape(object, out)) return true;
    }
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  PyErr_Format(PyExc_TypeError, "lens: expected a SpanContext (lens's or OpenTelemetry's), got %s",
               Py_TYPE(object)->tp_name);
  return false;
}

void bind_context(py::module_& m) {
  py::class_<lens::SpanContext>(m, "SpanContext", "A span's identity: trace id, span id, flags.")
      .def(py::init([](const py::int_& trace_id, const py::int_& span_id, int trace_flags, bool is_remote) {
             lens::SpanContext c;
             c.trace_id.bytes = id_from_int<16>(trace_id);
             c.span_id.bytes = id_from_int<8>(span_id);
             c.trace_flags = static_cast<std::uint8_t>(trace_flags);
             c.is_remote = is_remote;
             return c;
           }),
           py::arg("trace_id"), py::arg("span_id"), py::arg("trace_flags") = 1, py::arg("is_remote") = true)
      .def_property_readonly("trace_id",
                             [](const lens::SpanContext& c) { return id_to_int(c.trace_id.bytes.data(), 16); })
      .def_property_readonly("span_id", [](const lens::SpanContext& c) { return id_to_int(c.span_id.bytes.data(), 8); })
      .def_property_readonly("trace_id_hex",
                             [](const lens::SpanContext& c) { return hex_of(c.trace_id.bytes.data(), 16); })
      .def_property_readonly("span_id_hex",
                             [](const lens::SpanContext& c) { return hex_of(c.span_id.bytes.data(), 8); })
      .def_readonly("trace_flags", &lens::SpanContext::trace_flags)
      .def_readonly("is_remote", &lens::SpanContext::is_remote)
      .def_property_readonly("is_valid", &lens::SpanContext::is_valid)
      .def_property_readonly("is_sampled", &lens::SpanContext::is_sampled)
      .def_property_readonly(
          "trace_state", [](const lens::SpanContext&) { return py::none(); },
          "None: lens keeps no tracestate on a span (OpenTelemetry's attribute, for its propagators).")
      .def(
          "__eq__",
          [](const lens::SpanContext& a, const lens::SpanContext& b) {
            return a.trace_id == b.trace_id && a.span_id == b.span_id && a.trace_flags == b.trace_flags;
          },
          py::is_operator())
      .def("__hash__",
           [](const lens::SpanContext& c) {
             return py::hash(py::make_tuple(id_to_int(c.trace_id.bytes.data(), 16),
                                            id_to_int(c.span_id.bytes.data(), 8), c.trace_flags));
           })
      .def("__repr__", [](const lens::SpanContext& c) {
        return "SpanContext(trace_id=0x" + hex_of(c.trace_id.bytes.data(), 16) + ", span_id=0x" +
               hex_of(c.span_id.bytes.data(), 8) + ", trace_flags=" + std::to_string(c.trace_flags) +
               (c.is_remote ? ", remote)" : ")");
      });
  m.def("current_context", &lens::current_context, "The calling thread's current span context.");
  m.def("to_traceparent", &lens::to_traceparent);
  m.def("from_traceparent", &lens::from_traceparent);
  m.def("normalize_tracestate", &lens::normalize_tracestate);
  m.def("to_bytes", [](const lens::SpanContext& c) {
    lens::BinaryContext b = lens::to_binary(c);
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  });
  m.def("from_bytes", [](const py::bytes& data) -> std::optional<lens::SpanContext> {
    std::string s = data;
    lens::BinaryContext b{};
    if (s.size() != b.size()) return std::nullopt;
    std::copy(s.begin(), s.end(), b.begin());
    return lens::from_binary(b);
  });
  m.def("step_trace_id", [](const std::string& run_id, std::int64_t iteration) {
    lens::TraceId id = lens::step_trace_id(run_id, iteration);
    return id_to_int(id.bytes.data(), 16);
  });
  m.def("step_root_span_id", [](const py::int_& trace_id) {
    lens::TraceId trace;
    trace.bytes = id_from_int<16>(trace_id);
    return id_to_int(lens::step_root_span_id(trace).bytes.data(), 8);
  });
  m.def("derived_span_id", [](const py::int_& trace_id, std::string_view key) {
    lens::TraceId trace;
    trace.bytes = id_from_int<16>(trace_id);
    return id_to_int(lens::derived_span_id(trace, key).bytes.data(), 8);
  });
}

}  // namespace lens_python
