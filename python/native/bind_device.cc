// The stream device-timed spans record on (lens/device.h).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "lens/device.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// The stream device-timed spans record on (lens/device.h): a torch.cuda.Stream (its .cuda_stream), a raw cudaStream_t
// as an int, or None for the legacy default stream.
void* stream_handle(const py::object& stream) {
  if (stream.is_none()) return nullptr;
  py::object raw = py::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
  if (py::isinstance<py::int_>(raw) && !py::isinstance<py::bool_>(raw)) {
    const auto value = raw.cast<long long>();
    // A cudaStream_t handed over from Python is an integer (torch.cuda.Stream.cuda_stream).
    if (value >= 0)
      return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));  // NOLINT(performance-no-int-to-ptr)
  }
  throw py::type_error(
      "lens.set_device_stream takes a torch.cuda.Stream (anything with .cuda_stream), a raw "
      "cudaStream_t as a non-negative int, or None; got " +
      std::string(py::str(py::type::of(stream).attr("__name__"))));
}

}  // namespace

void bind_device(py::module_& m) {
  m.def(
      "set_device_stream", [](const py::object& stream) { lens::set_device_stream(stream_handle(stream)); },
      py::arg("stream"),
      "The calling thread's CUDA stream for device-timed spans (DEVICE_TIMING=cuda): a torch.cuda.Stream, a raw "
      "handle as an int, or None for the legacy default stream.");
  m.def(
      "device_stream", [] { return reinterpret_cast<std::uintptr_t>(lens::device_stream()); },
      "The calling thread's stream as set (0: the legacy default stream).");
}

}  // namespace lens_python
