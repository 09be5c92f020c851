#include "phases.h"

#include <atomic>
#include <cstdint>
#include <cstring>

#include "lens/straggler.h"
#include "spans.h"

namespace lens_python {
namespace {

struct PhaseObject {
  PyObject_HEAD
  lens::StepPhase phase;
  std::uint64_t begin;  // 0: not entered
};

PyTypeObject PhaseType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* phase_enter(PyObject* self, PyObject*) {
  auto* p = reinterpret_cast<PhaseObject*>(self);
  p->begin = lens::internal::step_phase_begin(p->phase);
  Py_RETURN_NONE;
}

PyObject* phase_exit(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* p = reinterpret_cast<PhaseObject*>(self);
  if (p->begin != 0) lens::internal::step_phase_end(p->phase, p->begin);
  p->begin = 0;
  Py_RETURN_FALSE;  // an exception goes on: the phase's time still counts
}

PyMethodDef phase_methods[] = {
    {"__enter__", phase_enter, METH_NOARGS, "Starts timing the phase."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(phase_exit)), METH_FASTCALL,
     "Adds the block's time to this step's phase; lets any exception through."},
    {nullptr, nullptr, 0, nullptr},
};

// step_phase("compute" | "wait"): a scope to time, or the shared disabled object while the search is off.
PyObject* step_phase(PyObject*, PyObject* name) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &size) : nullptr;
  lens::StepPhase phase;
  if (text != nullptr && size == 7 && std::memcmp(text, "compute", 7) == 0) {
    phase = lens::StepPhase::kCompute;
  } else if (text != nullptr && size == 4 && std::memcmp(text, "wait", 4) == 0) {
    phase = lens::StepPhase::kWait;
  } else {
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_UnicodeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "step_phase: %R is not a phase: compute or wait", name);
    }
    return nullptr;
  }
  if (!lens::internal::g_step_phases_on.load(std::memory_order_relaxed)) return null_span();
  PhaseObject* p = PyObject_New(PhaseObject, &PhaseType);
  if (p == nullptr) return nullptr;
  p->phase = phase;
  p->begin = 0;
  return reinterpret_cast<PyObject*>(p);
}

PyMethodDef functions[] = {
    {"step_phase", step_phase, METH_O,
     "step_phase(\"compute\" | \"wait\"): `with` it around a forward, backward (compute) or a receive, gradient sync "
     "(wait): the block's time counts toward this step's phase for the straggler search."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool add_phase_path(PyObject* module) {
  PhaseType.tp_name = "lens.StepPhase";
  PhaseType.tp_basicsize = sizeof(PhaseObject);
  PhaseType.tp_flags = Py_TPFLAGS_DEFAULT;
  PhaseType.tp_doc = "A step phase being timed (lens/straggler.h).";
  PhaseType.tp_methods = phase_methods;
  if (PyType_Ready(&PhaseType) < 0) return false;
  return PyModule_AddFunctions(module, functions) == 0;
}

}  // namespace lens_python
