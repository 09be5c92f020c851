// lens._native: the C++ library as the Python package sees it. The span path is hand-written (spans.cc); the
// rest (configuration, setup, context, metrics, logs, the worker bootstrap, the Megatron helpers) is bound with
// pybind11, one bind_<area>(m) per area in bind_<area>.cc (bindings.h), which the module body lists. Everything
// here runs with the GIL held, except force_flush and shutdown (they release it while they wait) and what lens's
// background thread calls (strategies, sinks), which takes it. The package's Python modules (python/lens/*.py) give
// it NeMo Lens's surface; nothing here is meant to be imported directly.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "lens/config_error.h"
#include "lens/version.h"
#include "otel_context.h"
#include "otel_tracer.h"
#include "phases.h"
#include "spans.h"

namespace py = pybind11;
using namespace lens_python;

PYBIND11_MODULE(_native, m) {
  m.doc() = "lens's C++ library for the lens Python package";
  py::register_exception<lens::ConfigError>(m, "ConfigError", PyExc_ValueError);
  if (!add_span_path(m.ptr()) || !add_otel_tracer(m.ptr()) || !add_otel_context(m.ptr())) throw py::error_already_set();
  if (!add_phase_path(m.ptr())) throw py::error_already_set();
  m.attr("LENS_VERSION") = LENS_VERSION_STRING;

  bind_groups(m);
  bind_context(m);
  bind_spans(m);
  bind_configuration(m);
  bind_setup(m);
  bind_strategies(m);
  bind_metrics(m);
  bind_logs(m);
  bind_identity(m);
  bind_stragglers(m);
  bind_device(m);
}
