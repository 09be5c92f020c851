// OpenTelemetry Python's runtime context kept in step with lens's context stack (lens.otel installs it as
// opentelemetry.context's), written against the CPython API: context.attach/detach push and pop lens's thread-local
// context, and context.get_current answers with lens's current span when one was made current after the last attach.
// OpenTelemetry's own context stays in its context variable, so its other keys behave as they do without lens.
#pragma once

#include <Python.h>

namespace lens_python {

// Adds the RuntimeContext type. False with a Python error set.
bool add_otel_context(PyObject* module);

}  // namespace lens_python
