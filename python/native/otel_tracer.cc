// The OpenTelemetry-facing tracer's entry points (otel_tracer.h says which calls take the C path).
#include "otel_tracer.h"

#include <string_view>

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

PyObject* start(PyObject* general, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames, bool current) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  TracerCall call;
  if (general == nullptr || !read_usual_call(args, nargs, kwnames, current, &call)) {
    if (general == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "lens.tracer is not imported");
      return nullptr;
    }
    return PyObject_Vectorcall(general, args, nargsf, kwnames);
  }
  SpanRequest r;
  r.name = call.name;
  r.attributes = call.attributes;
  r.kind = call.kind;
  r.record_exception = call.record_exception;
  r.ungated = true;  // no group named: recorded wherever this rank records any group
  r.make_current = current;
  r.start_now = !current;
  return new_span(r);
}

PyObject* tracer_start_span(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return start(g_start_span_general, args, nargsf, kwnames, false);
}

PyObject* tracer_start_as_current_span(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return start(g_start_as_current_span_general, args, nargsf, kwnames, true);
}

PyObject* set_tracer_fallbacks(PyObject*, PyObject* args) {
  PyObject *start_span = nullptr, *start_as_current_span = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &start_span, &start_as_current_span)) return nullptr;
  Py_XSETREF(g_start_span_general, Py_NewRef(start_span));
  Py_XSETREF(g_start_as_current_span_general, Py_NewRef(start_as_current_span));
  Py_RETURN_NONE;
}

PyMethodDef functions[] = {
    {"tracer_start_span", fastcall(tracer_start_span), METH_FASTCALL | METH_KEYWORDS,
     "OpenTelemetry's Tracer.start_span on lens (lens.tracer.Tracer.start_span)."},
    {"tracer_start_as_current_span", fastcall(tracer_start_as_current_span), METH_FASTCALL | METH_KEYWORDS,
     "OpenTelemetry's Tracer.start_as_current_span on lens (lens.tracer.Tracer.start_as_current_span)."},
    {"set_tracer_fallbacks", set_tracer_fallbacks, METH_VARARGS,
     "set_tracer_fallbacks(start_span, start_as_current_span): the general forms (lens.tracer's)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool add_otel_tracer(PyObject* module) { return PyModule_AddFunctions(module, functions) == 0; }

}  // namespace lens_python
