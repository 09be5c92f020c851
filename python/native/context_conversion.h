// SpanContext between the hand-written span path and the pybind11-bound SpanContext class (bind_context.cc).
#pragma once

#include <Python.h>

#include "lens/context.h"

namespace lens_python {

// A new reference to a lens.SpanContext, or null with a Python error set.
PyObject* context_to_python(const lens::SpanContext& context);
// False with TypeError set when `object` is not a lens.SpanContext.
bool context_from_python(PyObject* object, lens::SpanContext* out);

}  // namespace lens_python
