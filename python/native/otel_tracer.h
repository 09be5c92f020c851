// The entry points of lens's OpenTelemetry-facing tracer (lens.tracer.Tracer's start_span and
// start_as_current_span), written against the CPython API: the call OpenTelemetry-API code makes around a block,
// `tracer.start_as_current_span(name, attributes=..., kind=...)`, goes straight to a Span object. Every other form
// (a context, links, a start time, root, trace_id, end_on_exit=False, a rank that records nothing) goes to the
// Python functions lens.tracer registers, which give the same answer for those.
#pragma once

#include <Python.h>

namespace lens_python {

// Adds TracerBase (whose start_span and start_as_current_span these are, each span in the tracer's instrumentation
// scope) and set_tracer_fallbacks. False with a Python error set.
bool add_otel_tracer(PyObject* module);

}  // namespace lens_python
