// A second extension module with C++ spans in it, for the cross-language tests: linked to the same liblens.so as
// lens._native, so its spans share the process's pipeline and each thread's current context with Python's.
#include <pybind11/pybind11.h>

#include <string>

#include "lens/context.h"
#include "lens/megatron.h"
#include "lens/span.h"

namespace py = pybind11;

namespace {

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += {kHex[bytes[i] >> 4], kHex[bytes[i] & 15]};
  return out;
}

py::tuple ids(const lens::SpanContext& c) {
  return py::make_tuple(hex(c.trace_id.bytes.data(), 16), hex(c.span_id.bytes.data(), 8));
}

}  // namespace

PYBIND11_MODULE(lens_cpp_peer, m) {
  // A C++ span of the Megatron `layer` group around a Python callable; returns its (trace id, span id) in hex.
  m.def("layer_span", [](const std::string& name, const py::function& inside) {
    LENS_SPAN_NAMED(span, lens::megatron::group::layer, name);
    inside();
    return ids(span.context());
  });
  // The thread's current context as C++ sees it.
  m.def("current_ids", [] { return ids(lens::current_context()); });
}
