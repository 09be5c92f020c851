// The span path of lens's Python package, written against the CPython API by hand: is_span_group_enabled,
// managed_span, the Span object they yield and the callable trace_fn returns. Everything else is bound with
// pybind11 (module.cc); these are not, because they run on every layer of every micro-batch and a pybind11 call
// costs several times a C function call. A disabled group costs a dict lookup at most (none while every group is
// off) and allocates nothing.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "lens/context.h"
#include "lens/span.h"

namespace lens_python {

// A METH_FASTCALL function as the PyCFunction a PyMethodDef holds.
template <typename F>
PyCFunction fastcall(F f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

// Readies `type` and adds it to `module` as `attribute`. False with a Python error set.
bool ready(PyTypeObject* type, PyObject* module, const char* attribute);

// Adds the fast functions and the types to the module. False with a Python error set.
bool add_span_path(PyObject* module);

// Maps group names to catalogue ids for the checks (setup and SpanGroup.resolve set it): {name: id}.
void set_group_ids(PyObject* names_to_ids);

// True when `group` (a name) is enabled now; its catalogue id into *id.
bool group_is_enabled(PyObject* group, int* id);
// A new reference to the shared context manager of a disabled group (`with` yields None).
PyObject* null_span();

// Links a span takes at its start (more can be added with add_link once it exists).
inline constexpr int kMaxStartLinks = 8;

// What start_span (module.cc's general form) asks of a new Span object.
struct SpanRequest {
  PyObject* name = nullptr;        // str
  PyObject* attributes = nullptr;  // dict or null
  int group_id = 0;
  bool make_current = true;
  bool record_exception = true;
  bool root = false;
  std::optional<lens::TraceId> trace_id{};
  std::optional<lens::SpanContext> parent{};
  std::vector<lens::SpanContext> links{};  // at most kMaxStartLinks are kept
  bool start_now = false;                  // start at creation (start_span) rather than at __enter__
  lens::SpanKind kind = lens::SpanKind::kInternal;
  std::uint64_t start_unix_nanos = 0;  // a back-dated start (OpenTelemetry's start_time); 0: now
  bool ungated = false;                // no group named: recorded wherever any group is (StartOptions::ungated)
  bool redact = false;                 // NeMo Lens's default redaction of the attributes (span_cm)
  lens::InstrumentationScope scope{};  // the tracer's that starts it (lens.tracer.Tracer); lens's own by default
};
// A new reference to a Span object, or null with a Python error set.
PyObject* new_span(const SpanRequest& request);
// What OpenTelemetry's context needs to know of the thread's current span, a new reference: a Span object that
// writes to it (a live span made current by lens, in Python or C++; it never ends the span), its SpanContext
// (a context made current alone: ContextScope), or None (nothing, or a context OpenTelemetry attached itself).
PyObject* current_span_view();
// Whether `object` is a lens Span (managed_span's, a tracer's, a view); its context into *context when it is.
bool lens_span_context(PyObject* object, lens::SpanContext* context);

}  // namespace lens_python
