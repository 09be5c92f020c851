// The OpenTelemetry-facing tracer's entry points (otel_tracer.h says which calls take the C path).
#include "otel_tracer.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "lens/groups.h"
#include "spans.h"

namespace lens_python {
namespace {

// lens.tracer's general forms: (name, *args, **kwargs) -> what OpenTelemetry's Tracer method returns.
PyObject* g_start_span_general = nullptr;
PyObject* g_start_as_current_span_general = nullptr;

// What the C path takes of a call; anything it does not take sends the whole call to the general form.
struct TracerCall {
  PyObject* name = nullptr;
  PyObject* attributes = nullptr;
  lens::SpanKind kind = lens::SpanKind::kInternal;
  bool record_exception = true;
};

// OpenTelemetry's SpanKind (an Enum of 0..4) or its value, as OTLP's kind (1..5). False: not one of them.
bool kind_of(PyObject* value, lens::SpanKind* out) {
  if (value == Py_None) return true;
  PyObject* number = PyLong_Check(value) ? Py_NewRef(value) : PyObject_GetAttrString(value, "value");
  if (number == nullptr) {
    PyErr_Clear();
    return false;
  }
  const long v = PyLong_Check(number) && !PyBool_Check(number) ? PyLong_AsLong(number) : -1;
  Py_DECREF(number);
  if (v == -1 && PyErr_Occurred()) PyErr_Clear();
  if (v < 0 || v > 4) return false;
  *out = static_cast<lens::SpanKind>(v + 1);
  return true;
}

bool keyword_is(PyObject* key, std::string_view name) {
  return PyUnicode_CompareWithASCIIString(key, name.data()) == 0;
}

// Reads a call of start_span / start_as_current_span the C path takes: the name alone as a positional argument,
// and of the keywords only attributes (a dict or None), kind, record_exception, set_status_on_exception, context
// (None: the current span) and, where `current`, end_on_exit=True.
bool read_usual_call(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, bool current, TracerCall* call) {
  if (nargs != 1 || !PyUnicode_Check(args[0]) || !lens::internal::records_ungated_spans()) return false;
  call->name = args[0];
  const Py_ssize_t n = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = args[nargs + i];
    if (keyword_is(key, "attributes")) {
      if (value != Py_None && !PyDict_Check(value)) return false;
      call->attributes = value;
    } else if (keyword_is(key, "kind")) {
      if (!kind_of(value, &call->kind)) return false;
    } else if (keyword_is(key, "record_exception") || keyword_is(key, "set_status_on_exception")) {
      const int truth = PyObject_IsTrue(value);
      if (truth < 0) {
        PyErr_Clear();
        return false;
      }
      call->record_exception = call->record_exception && truth == 1;
    } else if (keyword_is(key, "context")) {
      if (value != Py_None) return false;
    } else if (current && keyword_is(key, "end_on_exit")) {
      if (value != Py_True) return false;
    } else {
      return false;
    }
  }
  return true;
}

// lens.tracer.Tracer's base: the instrumentation scope of the name and version the tracer was asked for, which
// every span it starts is exported under.
struct TracerObject {
  PyObject_HEAD
  lens::InstrumentationScope scope;
};

// A str argument as text; anything else (None, a module OpenTelemetry would warn about) as none given.
std::string_view text_or_empty(PyObject* value) {
  if (value == nullptr || !PyUnicode_Check(value)) return {};
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(value, &size);
  if (data == nullptr) {
    PyErr_Clear();
    return {};
  }
  return {data, static_cast<std::size_t>(size)};
}

int tracer_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"name", "version", nullptr};
  PyObject *name = nullptr, *version = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO", const_cast<char**>(keywords), &name, &version)) return -1;
  reinterpret_cast<TracerObject*>(self)->scope =
      lens::instrumentation_scope(text_or_empty(name), text_or_empty(version));
  return 0;
}

PyObject* tracer_scope_id(PyObject* self, void*) {
  return PyLong_FromLong(reinterpret_cast<TracerObject*>(self)->scope.id);
}

// The general form of a call: `general(tracer, *args, **kwargs)`.
PyObject* call_general(PyObject* general, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (general == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "lens.tracer is not imported");
    return nullptr;
  }
  const Py_ssize_t total = nargs + (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
  std::vector<PyObject*> with_tracer(static_cast<std::size_t>(total) + 1);
  with_tracer[0] = self;
  std::copy(args, args + total, with_tracer.begin() + 1);
  return PyObject_Vectorcall(general, with_tracer.data(), static_cast<std::size_t>(nargs) + 1, kwnames);
}

PyObject* start(PyObject* self, PyObject* general, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames,
                bool current) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  TracerCall call;
  if (!read_usual_call(args, nargs, kwnames, current, &call)) return call_general(general, self, args, nargs, kwnames);
  SpanRequest r;
  r.name = call.name;
  r.attributes = call.attributes;
  r.kind = call.kind;
  r.record_exception = call.record_exception;
  r.ungated = true;  // no group named: recorded wherever this rank records any group
  r.make_current = current;
  r.start_now = !current;
  r.scope = reinterpret_cast<TracerObject*>(self)->scope;
  return new_span(r);
}

PyObject* tracer_start_span(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return start(self, g_start_span_general, args, nargsf, kwnames, false);
}

PyObject* tracer_start_as_current_span(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return start(self, g_start_as_current_span_general, args, nargsf, kwnames, true);
}

PyObject* set_tracer_fallbacks(PyObject*, PyObject* args) {
  PyObject *start_span = nullptr, *start_as_current_span = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &start_span, &start_as_current_span)) return nullptr;
  Py_XSETREF(g_start_span_general, Py_NewRef(start_span));
  Py_XSETREF(g_start_as_current_span_general, Py_NewRef(start_as_current_span));
  Py_RETURN_NONE;
}

PyMethodDef tracer_methods[] = {
    {"start_span", fastcall(tracer_start_span), METH_FASTCALL | METH_KEYWORDS,
     "OpenTelemetry's Tracer.start_span on lens (lens.tracer.Tracer.start_span)."},
    {"start_as_current_span", fastcall(tracer_start_as_current_span), METH_FASTCALL | METH_KEYWORDS,
     "OpenTelemetry's Tracer.start_as_current_span on lens (lens.tracer.Tracer.start_as_current_span)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef tracer_getset[] = {
    {"scope_id", tracer_scope_id, nullptr, "The instrumentation scope its spans are exported under (0: lens's own).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject TracerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyMethodDef functions[] = {
    {"set_tracer_fallbacks", set_tracer_fallbacks, METH_VARARGS,
     "set_tracer_fallbacks(start_span, start_as_current_span): the general forms (lens.tracer's), called with the "
     "tracer first."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool add_otel_tracer(PyObject* module) {
  TracerType.tp_name = "lens._native.TracerBase";
  TracerType.tp_doc = "lens.tracer.Tracer's base: TracerBase(name=None, version=None), its spans in that scope.";
  TracerType.tp_basicsize = sizeof(TracerObject);
  TracerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  TracerType.tp_new = PyType_GenericNew;
  TracerType.tp_init = tracer_init;
  TracerType.tp_methods = tracer_methods;
  TracerType.tp_getset = tracer_getset;
  if (PyType_Ready(&TracerType) < 0) return false;
  if (PyModule_AddObjectRef(module, "TracerBase", reinterpret_cast<PyObject*>(&TracerType)) < 0) return false;
  return PyModule_AddFunctions(module, functions) == 0;
}

}  // namespace lens_python
