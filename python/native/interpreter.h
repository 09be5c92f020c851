// Whether Python code may still run: lens's background thread asks before it takes the GIL for a late batch.
#pragma once

#include <Python.h>

namespace lens_python {

// True once the interpreter is finalizing or gone (Py_IsFinalizing is public API from CPython 3.13, private with
// the same meaning before).
inline bool interpreter_ending() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing() != 0;
#else
  return !Py_IsInitialized() || _Py_IsFinalizing() != 0;
#endif
}

}  // namespace lens_python
