// `with lens.step_phase("compute"):` (lens/straggler.h) written against the CPython API by hand, as the span path
// is (spans.h): it runs around every forward, backward and receive of a training loop, where a pybind11 method
// call costs several C function calls. With the straggler search off it returns the shared disabled-span object.
#pragma once

#include <Python.h>

namespace lens_python {

// Adds step_phase and its type to the module. False with a Python error set.
bool add_phase_path(PyObject* module);

}  // namespace lens_python
