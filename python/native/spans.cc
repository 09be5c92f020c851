// The span path of the Python package (spans.h says why it is written against the CPython API).
#include "spans.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "attributes.h"
#include "context_conversion.h"
#include "lens/groups.h"
#include "lens/span.h"

namespace lens_python {
namespace {

using lens::internal::SpanHandle;
using lens::internal::ThreadState;

// This file's process globals (the group ids, their cache, the shared null span) are read and written only by
// Python calls into the module, which hold the GIL: the GIL is their lock.
PyObject* g_group_ids = nullptr;  // {group name: catalogue id}

// The ids of the group objects seen last, by identity: call sites pass the same constant objects
// (MegatronSpanGroup.LAYER) every time, and a pointer compare is cheaper than a dict lookup. An entry holds a
// reference to its key, so the address cannot be reused by another object while it is cached.
struct GroupCacheEntry {
  PyObject* key = nullptr;
  long id = -1;
};
constexpr std::size_t kGroupCacheSize = 32;
GroupCacheEntry g_group_cache[kGroupCacheSize];

void clear_group_cache() {
  for (GroupCacheEntry& e : g_group_cache) {
    Py_CLEAR(e.key);
    e.id = -1;
  }
}

// The catalogue id of a group name; -1 for an unknown or unhashable group (simply not enabled, as in the
// reference).
long group_id(PyObject* group) {
  GroupCacheEntry& e = g_group_cache[(reinterpret_cast<std::uintptr_t>(group) >> 4) % kGroupCacheSize];
  if (e.key == group) return e.id;
  PyObject* id = PyDict_GetItemWithError(g_group_ids, group);  // borrowed
  long value = -1;
  if (id != nullptr) {
    value = PyLong_AsLong(id);
  } else {
    PyErr_Clear();
  }
  Py_INCREF(group);
  Py_XSETREF(e.key, group);
  e.id = value;
  return value;
}

// The groups enabled that lens's own set does not serve (lens.telemetry.set_enabled_span_groups says which): a
// frozenset of names outside the catalogue, or of any names where this rank records nothing (before setup, a rank
// that does not export). Their spans are ungated lens spans where this rank records them, else the spans of
// OpenTelemetry's global tracer provider, through the two routes of lens._global_route, as NeMo Lens's helpers
// make theirs. Null: none.
PyObject* g_other_groups = nullptr;
PyObject* g_route_managed_span = nullptr;  // (name, **attributes) -> a context manager
PyObject* g_route_traced_span = nullptr;   // (name) -> a context manager for one call of a trace_fn function

// Whether `group` is one of the other groups enabled. Nothing is looked up while there are none.
bool other_group_enabled(PyObject* group) {
  if (g_other_groups == nullptr || PySet_GET_SIZE(g_other_groups) == 0) return false;
  const int found = PySet_Contains(g_other_groups, group);
  if (found < 0) PyErr_Clear();  // unhashable: not a group
  return found == 1;
}

// Whether `group` is in `bits`. One relaxed load while every group is off (a disabled rank): no lookup at all.
bool group_in(const std::atomic<std::uint64_t>& bits_now, PyObject* group, int* id_out) {
  const std::uint64_t bits = bits_now.load(std::memory_order_relaxed);
  if (bits == 0) return false;
  const long v = group_id(group);
  if (id_out != nullptr) *id_out = static_cast<int>(v);
  return v >= 0 && v < 64 && ((bits >> v) & 1U) != 0;
}

// NeMo Lens's question: is the group enabled (its spans exported)?
bool group_enabled(PyObject* group, int* id_out) { return group_in(lens::internal::g_enabled_set_bits, group, id_out); }

// Whether a span site of `group` runs: enabled, or kept as a position for hang snapshots (the loop's groups).
bool group_recorded(PyObject* group, int* id_out) {
  return group_in(lens::internal::g_recorded_group_bits, group, id_out);
}

std::string_view utf8_or_empty(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &size) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return {};
  }
  return {data, static_cast<std::size_t>(size)};
}

// The type's qualified name and str(exception), as OpenTelemetry's Python SDK records them.
struct ExceptionText {
  std::string type_name = "Exception", message;
};

ExceptionText exception_text(PyTypeObject* type, PyObject* value) {
  ExceptionText text;
  if (PyObject* q = PyType_GetQualName(type)) {
    text.type_name = std::string(utf8_or_empty(q));
    Py_DECREF(q);
  }
  if (value != nullptr && value != Py_None) {
    if (PyObject* s = PyObject_Str(value)) {
      text.message = std::string(utf8_or_empty(s));
      Py_DECREF(s);
    } else {
      PyErr_Clear();
    }
  }
  return text;
}

// How an exception that left a span describes its ERROR status, as NeMo Lens's helpers do: managed_span sets the
// message alone (its own set_status), the others what OpenTelemetry's SDK sets ("Type: message").
enum class StatusText : unsigned char { kTypeAndMessage, kMessage };

// An exception that left the span: the `exception` event and ERROR status.
void record_python_exception(SpanHandle& h, PyObject* type, PyObject* value, bool escaped, StatusText form) {
  const ExceptionText text = exception_text(reinterpret_cast<PyTypeObject*>(type), value);
  lens::internal::record_exception(h, text.type_name, text.message, escaped);
  std::string description = text.message;
  if (text.message.empty())
    description = text.type_name;
  else if (form == StatusText::kTypeAndMessage)
    description = text.type_name + ": " + text.message;
  lens::internal::set_status(h, lens::StatusCode::kError, description);
}

// --- the context manager of a disabled group: one shared object, nothing allocated -------------------------

PyObject* null_enter(PyObject*, PyObject*) { Py_RETURN_NONE; }
PyObject* null_exit(PyObject*, PyObject* const*, Py_ssize_t) { Py_RETURN_FALSE; }

PyMethodDef null_methods[] = {
    {"__enter__", null_enter, METH_NOARGS, "Yields None: the group is off."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(null_exit)), METH_FASTCALL,
     "Lets any exception through."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject NullSpanType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyObject* g_null_span = nullptr;

// --- Span ----------------------------------------------------------------------------------------------

constexpr Py_ssize_t kInlineKeywords = 6;

struct SpanObject {
  PyObject_HEAD
  SpanHandle h;
  ThreadState* pushed_to;
  PyObject* name;
  PyObject* attributes;  // dict or null: applied at start
  // managed_span's keyword attributes: their names (a tuple, or null), and their values, in kwinline when there
  // are at most kInlineKeywords of them (no tuple made for the usual few), else in the tuple kwvalues.
  PyObject* kwnames;
  PyObject* kwvalues;
  PyObject* kwinline[kInlineKeywords];
  lens::SpanContext parent;
  lens::SpanContext links[kMaxStartLinks];
  unsigned char link_count;
  lens::TraceId trace_id;
  std::uint64_t start_unix_nanos;
  unsigned char group_id;
  lens::SpanKind kind;
  lens::InstrumentationScope scope;  // the tracer's (lens.tracer.Tracer); lens's own for the rest
  bool has_parent, has_trace_id, root, make_current, record_exception, started, ended;
  bool borrowed;           // a view of the current span (current_span_view): writes to it, never ends it
  bool ungated;            // no group named (StartOptions::ungated)
  bool redact;             // the start attributes get NeMo Lens's default redaction (managed_span, span_cm)
  bool position_shown;     // a position that `with` yields (SpanRoute::kPositionShown), not None
  StatusText status_text;  // how an exception leaving the span describes its status
};

PyTypeObject SpanType = {PyVarObject_HEAD_INIT(nullptr, 0)};

SpanObject* alloc_span(PyObject* name) {
  SpanObject* s = PyObject_New(SpanObject, &SpanType);
  if (s == nullptr) return nullptr;
  s->h = SpanHandle{};
  s->pushed_to = nullptr;
  Py_INCREF(name);
  s->name = name;
  s->attributes = s->kwnames = s->kwvalues = nullptr;
  s->parent = lens::SpanContext{};
  s->link_count = 0;
  s->trace_id = lens::TraceId{};
  s->start_unix_nanos = 0;
  s->group_id = 0;
  s->kind = lens::SpanKind::kInternal;
  s->scope = {};
  s->has_parent = s->has_trace_id = s->root = false;
  s->make_current = s->record_exception = true;
  s->started = s->ended = s->borrowed = s->ungated = s->redact = s->position_shown = false;
  s->status_text = StatusText::kTypeAndMessage;
  return s;
}

// managed_span's keyword values (as many as its names).
PyObject* const* keyword_values(const SpanObject* s) {
  return s->kwvalues != nullptr ? &PyTuple_GET_ITEM(s->kwvalues, 0) : s->kwinline;
}

// The span's attributes: the dict of the general form and managed_span's keywords.
void collect_attributes(const SpanObject* s, AttributeBuffer& buffer) {
  buffer.add_dict(s->attributes);
  if (s->kwnames != nullptr) {
    const Py_ssize_t n = PyTuple_GET_SIZE(s->kwnames);
    PyObject* const* values = keyword_values(s);
    for (Py_ssize_t i = 0; i < n; ++i) buffer.add(PyTuple_GET_ITEM(s->kwnames, i), values[i]);
  }
}

void start(SpanObject* s) {
  if (s->started) return;
  s->started = true;
  lens::StartOptions options;
  options.kind = s->kind;
  options.start_unix_nanos = s->start_unix_nanos;
  options.ungated = s->ungated;
  options.root = s->root;
  options.scope = s->scope;
  if (s->has_parent) options.parent = &s->parent;
  if (s->has_trace_id) options.trace_id = &s->trace_id;
  AttributeBuffer buffer(s->redact);
  collect_attributes(s, buffer);
  lens::internal::start_span(s->h, lens::SpanGroup(s->group_id), lens::SpanName(utf8_or_empty(s->name)),
                             buffer.attributes(), options);
  for (int i = 0; i < s->link_count && s->h.is_writable(); ++i) lens::internal::add_link(s->h, s->links[i], {});
  if (s->make_current && s->h.context.is_valid()) s->pushed_to = lens::internal::push_context(s->h.context, &s->h);
}

void finish(SpanObject* s, std::uint64_t end_unix_nanos = 0) {
  if (!s->started || s->ended || s->borrowed) return;
  s->ended = true;
  if (s->pushed_to != nullptr) lens::internal::pop_context(std::exchange(s->pushed_to, nullptr));
  if (s->h.is_writable()) lens::internal::end_span(s->h, false, end_unix_nanos);
}

void span_dealloc(PyObject* self) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (s->started && !s->ended) {  // never ended: it ends now, without touching whichever context is current
    s->pushed_to = nullptr;
    finish(s);
  }
  Py_XDECREF(s->name);
  Py_XDECREF(s->attributes);
  if (s->kwnames != nullptr && s->kwvalues == nullptr)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->kwnames); ++i) Py_DECREF(s->kwinline[i]);
  Py_XDECREF(s->kwnames);
  Py_XDECREF(s->kwvalues);
  PyObject_Free(self);
}

// A span of a group kept only as a position yields None, as NeMo Lens's managed_span does for a group that is off:
// the loop's code sees what it would without hang snapshots.
PyObject* span_enter(PyObject* self, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  start(s);
  if (s->h.kind == lens::internal::SpanHandle::Kind::kPosition && !s->position_shown) Py_RETURN_NONE;
  Py_INCREF(self);
  return self;
}

// __exit__(type, value, traceback): an Exception is recorded (ERROR status, the `exception` event); a
// BaseException that is not one (KeyboardInterrupt, SystemExit, GeneratorExit) ends the span unrecorded.
PyObject* span_exit(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  PyObject* type = nargs > 0 ? args[0] : Py_None;
  if (type != Py_None && s->record_exception && s->h.is_writable() && PyType_Check(type) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), reinterpret_cast<PyTypeObject*>(PyExc_Exception)))
    record_python_exception(s->h, type, nargs > 1 ? args[1] : nullptr, true, s->status_text);
  finish(s);
  Py_RETURN_FALSE;
}

// A time in Unix nanoseconds (an int, as OpenTelemetry's start_time/end_time/timestamp); 0 for None. False with
// an error set for anything else.
bool unix_nanos_from_python(PyObject* value, const char* what, std::uint64_t* out) {
  *out = 0;
  if (value == nullptr || value == Py_None) return true;
  if (!PyLong_Check(value) || PyBool_Check(value)) {
    PyErr_Format(PyExc_TypeError, "%s: Unix nanoseconds as an int (time.time_ns()), not %s", what,
                 Py_TYPE(value)->tp_name);
    return false;
  }
  const unsigned long long nanos = PyLong_AsUnsignedLongLong(value);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s: Unix nanoseconds between 0 and 2**64-1", what);
    return false;
  }
  *out = nanos;
  return true;
}

// end(end_time=None): end_time in Unix nanoseconds, as OpenTelemetry's.
PyObject* span_end(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"end_time", nullptr};
  PyObject* end_time = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", const_cast<char**>(keywords), &end_time)) return nullptr;
  std::uint64_t nanos = 0;
  if (!unix_nanos_from_python(end_time, "end(end_time=...)", &nanos)) return nullptr;
  finish(reinterpret_cast<SpanObject*>(self), nanos);
  Py_RETURN_NONE;
}

PyObject* span_update_name(PyObject* self, PyObject* name) {
  if (!PyUnicode_Check(name)) {
    PyErr_SetString(PyExc_TypeError, "update_name: the name is a str");
    return nullptr;
  }
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (s->h.is_writable() && !s->ended) lens::internal::update_name(s->h, lens::SpanName(utf8_or_empty(name)));
  Py_INCREF(name);
  Py_XSETREF(s->name, name);
  Py_RETURN_NONE;
}

PyObject* span_is_recording(PyObject* self, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  return PyBool_FromLong(s->h.records() && !s->ended);
}

PyObject* span_get_span_context(PyObject* self, PyObject*) {
  return context_to_python(reinterpret_cast<SpanObject*>(self)->h.context);
}

PyObject* span_set_attribute(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_attribute(key, value) takes two arguments");
    return nullptr;
  }
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (!s->h.is_writable()) Py_RETURN_NONE;
  AttributeBuffer buffer;
  if (buffer.add(args[0], args[1])) lens::internal::set_attributes(s->h, buffer.attributes());
  Py_RETURN_NONE;
}

PyObject* span_set_attributes(PyObject* self, PyObject* attributes) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (!s->h.is_writable()) Py_RETURN_NONE;
  AttributeBuffer buffer;
  buffer.add_dict(attributes);
  lens::internal::set_attributes(s->h, buffer.attributes());
  Py_RETURN_NONE;
}

// add_event(name, attributes=None)
PyObject* span_add_event(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"name", "attributes", "timestamp", nullptr};
  PyObject *name = nullptr, *attributes = nullptr, *timestamp = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U|OO", const_cast<char**>(keywords), &name, &attributes, &timestamp))
    return nullptr;
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (!s->h.is_writable()) Py_RETURN_NONE;
  AttributeBuffer buffer;
  buffer.add_dict(attributes);
  lens::internal::add_event(s->h, lens::SpanName(utf8_or_empty(name)), buffer.attributes());
  Py_RETURN_NONE;
}

// add_link(context, attributes=None): a SpanContext.
PyObject* span_add_link(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"context", "attributes", nullptr};
  PyObject *context = nullptr, *attributes = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", const_cast<char**>(keywords), &context, &attributes))
    return nullptr;
  lens::SpanContext link;
  if (!context_from_python(context, &link)) return nullptr;
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (!s->h.is_writable() || !link.is_valid()) Py_RETURN_NONE;
  AttributeBuffer buffer;
  buffer.add_dict(attributes);
  lens::internal::add_link(s->h, link, buffer.attributes());
  Py_RETURN_NONE;
}

// set_status(status, description=None): lens.StatusCode (or its value, or "UNSET"/"OK"/"ERROR"), or any object
// with a status_code and a description (OpenTelemetry's Status).
PyObject* span_set_status(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"status", "description", nullptr};
  PyObject *status = nullptr, *description = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", const_cast<char**>(keywords), &status, &description))
    return nullptr;
  PyObject* code_object = status;
  PyObject* owned = nullptr;
  if (PyObject_HasAttrString(status, "status_code")) {
    owned = code_object = PyObject_GetAttrString(status, "status_code");
    if (description == Py_None)
      description = PyObject_GetAttrString(status, "description");
    else
      Py_INCREF(description);
  } else {
    Py_INCREF(description);
  }
  long code = -1;
  if (code_object != nullptr && PyUnicode_Check(code_object)) {
    std::string_view text = utf8_or_empty(code_object);
    code = text == "UNSET" ? 0 : text == "OK" ? 1 : text == "ERROR" ? 2 : -1;
  } else if (code_object != nullptr && PyIndex_Check(code_object)) {
    code = PyNumber_AsSsize_t(code_object, nullptr);
  } else if (code_object != nullptr && PyObject_HasAttrString(code_object, "value")) {
    PyObject* value = PyObject_GetAttrString(code_object, "value");  // an Enum of OpenTelemetry's
    if (value != nullptr && PyIndex_Check(value)) code = PyNumber_AsSsize_t(value, nullptr);
    Py_XDECREF(value);
  }
  Py_XDECREF(owned);
  if (PyErr_Occurred()) PyErr_Clear();
  if (code < 0 || code > 2) {
    Py_XDECREF(description);
    PyErr_SetString(PyExc_ValueError, "set_status: the status is lens.StatusCode.UNSET, OK or ERROR");
    return nullptr;
  }
  auto* s = reinterpret_cast<SpanObject*>(self);
  std::string_view text = description != nullptr && description != Py_None ? utf8_or_empty(description) : "";
  if (s->h.is_writable()) lens::internal::set_status(s->h, static_cast<lens::StatusCode>(code), text);
  Py_XDECREF(description);
  Py_RETURN_NONE;
}

// record_exception(exception, attributes=None, timestamp=None, escaped=False): the event only, as in
// OpenTelemetry; the status is the caller's to set.
PyObject* span_record_exception(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"exception", "attributes", "timestamp", "escaped", nullptr};
  PyObject *exception = nullptr, *attributes = nullptr, *timestamp = nullptr;
  int escaped = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOp", const_cast<char**>(keywords), &exception, &attributes,
                                   &timestamp, &escaped))
    return nullptr;
  auto* s = reinterpret_cast<SpanObject*>(self);
  if (!s->h.is_writable()) Py_RETURN_NONE;
  const ExceptionText text = exception_text(Py_TYPE(exception), exception);
  lens::internal::record_exception(s->h, text.type_name, text.message, escaped != 0);
  Py_RETURN_NONE;
}

PyObject* span_repr(PyObject* self) {
  auto* s = reinterpret_cast<SpanObject*>(self);
  return PyUnicode_FromFormat("<lens.Span %R%s>", s->name, s->h.is_writable() ? " recording" : "");
}

PyObject* span_get_name(PyObject* self, void*) {
  PyObject* name = reinterpret_cast<SpanObject*>(self)->name;
  Py_INCREF(name);
  return name;
}

PyMethodDef span_methods[] = {
    {"__enter__", span_enter, METH_NOARGS, "Starts the span and makes it current; returns it."},
    {"__exit__", fastcall(span_exit), METH_FASTCALL,
     "Ends the span; an Exception is recorded with ERROR status and re-raised."},
    {"end", fastcall(span_end), METH_VARARGS | METH_KEYWORDS,
     "end(end_time=None): ends the span, at end_time (Unix nanoseconds) if given; again: nothing."},
    {"update_name", span_update_name, METH_O, "update_name(name): renames the span."},
    {"is_recording", span_is_recording, METH_NOARGS, "True while the span records."},
    {"get_span_context", span_get_span_context, METH_NOARGS, "The span's SpanContext."},
    {"set_attribute", fastcall(span_set_attribute), METH_FASTCALL, "set_attribute(key, value)"},
    {"set_attributes", span_set_attributes, METH_O, "set_attributes({key: value, ...})"},
    {"add_event", fastcall(span_add_event), METH_VARARGS | METH_KEYWORDS, "add_event(name, attributes=None)"},
    {"add_link", fastcall(span_add_link), METH_VARARGS | METH_KEYWORDS, "add_link(context, attributes=None)"},
    {"set_status", fastcall(span_set_status), METH_VARARGS | METH_KEYWORDS, "set_status(status, description=None)"},
    {"record_exception", fastcall(span_record_exception), METH_VARARGS | METH_KEYWORDS,
     "record_exception(exception, attributes=None, timestamp=None, escaped=False)"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef span_getset[] = {
    {"name", span_get_name, nullptr, "The span's name.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// --- the fast functions ----------------------------------------------------------------------------------

PyObject* is_span_group_enabled(PyObject*, PyObject* group) {
  return PyBool_FromLong(group_enabled(group, nullptr) || other_group_enabled(group));
}

// How a span of an enabled group is made: by lens's own set; as a position for hang snapshots that the application,
// having enabled the group where lens records nothing, sees as a non-recording span; as an ungated lens span
// (another group, where this rank records); or through OpenTelemetry's global tracer provider (another group, where
// lens records nothing).
enum class SpanRoute : unsigned char { kOff, kLens, kPositionShown, kLensUngated, kGlobalProvider };

SpanRoute route_of(PyObject* group, int* id) {
  if (group_recorded(group, id)) {
    const std::uint64_t enabled = lens::internal::g_enabled_group_bits.load(std::memory_order_relaxed);
    if (((enabled >> *id) & 1U) != 0 || !other_group_enabled(group)) return SpanRoute::kLens;
    return SpanRoute::kPositionShown;
  }
  if (!other_group_enabled(group)) return SpanRoute::kOff;
  return lens::internal::records_ungated_spans() ? SpanRoute::kLensUngated : SpanRoute::kGlobalProvider;
}

bool is_tracer_keyword(PyObject* key) { return PyUnicode_CompareWithASCIIString(key, "tracer") == 0; }

// managed_span's keyword arguments but `tracer`, as a dict (the global provider's route takes them so).
PyObject* attributes_dict(PyObject* const* values, PyObject* kwnames) {
  PyObject* attributes = PyDict_New();
  if (attributes == nullptr || kwnames == nullptr) return attributes;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    if (is_tracer_keyword(key)) continue;
    if (PyDict_SetItem(attributes, key, values[i]) < 0) {
      Py_DECREF(attributes);
      return nullptr;
    }
  }
  return attributes;
}

PyObject* managed_span_of_global_provider(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* attributes = attributes_dict(args + nargs, kwnames);
  if (attributes == nullptr) return nullptr;
  PyObject* positional = PyTuple_Pack(1, args[1]);
  PyObject* span = positional != nullptr ? PyObject_Call(g_route_managed_span, positional, attributes) : nullptr;
  Py_XDECREF(positional);
  Py_DECREF(attributes);
  return span;
}

// Keeps managed_span's keyword arguments as the span's attributes (`values` as many as `kwnames`). `tracer` as a
// keyword is the tracer, not an attribute: lens has one tracer per process. False with a Python error set.
bool keep_keyword_attributes(SpanObject* s, PyObject* const* values, PyObject* kwnames) {
  const Py_ssize_t n = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  Py_ssize_t tracers = 0;
  for (Py_ssize_t i = 0; i < n; ++i) tracers += is_tracer_keyword(PyTuple_GET_ITEM(kwnames, i)) ? 1 : 0;
  if (n - tracers == 0) return true;
  if (tracers == 0 && n <= kInlineKeywords) {  // the usual call: the caller's names, the values kept inline
    for (Py_ssize_t i = 0; i < n; ++i) s->kwinline[i] = Py_NewRef(values[i]);
    s->kwnames = Py_NewRef(kwnames);
    return true;
  }
  PyObject* names = PyTuple_New(n - tracers);
  PyObject* kept = PyTuple_New(n - tracers);
  if (names == nullptr || kept == nullptr) {
    Py_XDECREF(names);
    Py_XDECREF(kept);
    return false;
  }
  for (Py_ssize_t i = 0, k = 0; i < n; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    if (is_tracer_keyword(key)) continue;
    PyTuple_SET_ITEM(names, k, Py_NewRef(key));
    PyTuple_SET_ITEM(kept, k, Py_NewRef(values[i]));
    ++k;
  }
  s->kwnames = names;
  s->kwvalues = kept;
  return true;
}

// managed_span(group, name, tracer=None, **attributes)
PyObject* managed_span(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 2 || nargs > 3) {
    PyErr_SetString(PyExc_TypeError, "managed_span(group, name, tracer=None, **attributes)");
    return nullptr;
  }
  int id = 0;
  const SpanRoute route = route_of(args[0], &id);
  if (route == SpanRoute::kOff) {
    Py_INCREF(g_null_span);
    return g_null_span;
  }
  if (!PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "managed_span: the name is a str");
    return nullptr;
  }
  if (route == SpanRoute::kGlobalProvider) return managed_span_of_global_provider(args, nargs, kwnames);
  SpanObject* s = alloc_span(args[1]);
  if (s == nullptr) return nullptr;
  s->group_id = static_cast<unsigned char>(route == SpanRoute::kLensUngated ? 0 : id);
  s->ungated = route == SpanRoute::kLensUngated;
  s->position_shown = route == SpanRoute::kPositionShown;
  s->redact = true;
  s->status_text = StatusText::kMessage;
  if (!keep_keyword_attributes(s, args + nargs, kwnames)) {
    Py_DECREF(s);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(s);
}

// --- trace_fn's callable -----------------------------------------------------------------------------------

struct TracedFunction {
  PyObject_HEAD
  PyObject* function;
  PyObject* group;
  PyObject* name;
  PyObject* dict;  // functools.update_wrapper writes __name__, __doc__, __wrapped__ here
  vectorcallfunc vectorcall;
};

PyTypeObject TracedFunctionType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// One call inside the context manager the global provider's route gives: its __exit__ sees what the call raised.
PyObject* call_in_global_provider_span(TracedFunction* t, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* span = PyObject_CallOneArg(g_route_traced_span, t->name);
  if (span == nullptr) return nullptr;
  PyObject* entered = PyObject_CallMethod(span, "__enter__", nullptr);
  if (entered == nullptr) {
    Py_DECREF(span);
    return nullptr;
  }
  Py_DECREF(entered);
  PyObject* result = PyObject_Vectorcall(t->function, args, nargsf, kwnames);
  PyObject* exited = nullptr;
  if (result != nullptr) {
    exited = PyObject_CallMethod(span, "__exit__", "OOO", Py_None, Py_None, Py_None);
  } else {
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    exited =
        PyObject_CallMethod(span, "__exit__", "OOO", type, value ? value : Py_None, traceback ? traceback : Py_None);
    if (exited != nullptr) {
      PyErr_Restore(type, value, traceback);  // the call's exception goes on, as it does out of trace_fn's span
    } else {
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(traceback);
    }
  }
  Py_DECREF(span);
  if (exited == nullptr) {
    Py_XDECREF(result);
    return nullptr;
  }
  Py_DECREF(exited);
  return result;
}

// A trace_fn call's span lives on this frame, as a LENS_SPAN's does: the function never sees it, so no Python object
// is made for it (a position for hang snapshots, or a kept span).
PyObject* traced_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* t = reinterpret_cast<TracedFunction*>(self);
  int id = 0;
  const SpanRoute route = route_of(t->group, &id);
  if (route == SpanRoute::kOff) return PyObject_Vectorcall(t->function, args, nargsf, kwnames);
  if (route == SpanRoute::kGlobalProvider) return call_in_global_provider_span(t, args, nargsf, kwnames);
  SpanHandle h;
  lens::StartOptions options;
  options.ungated = route == SpanRoute::kLensUngated;
  lens::internal::ThreadState* pushed_to =
      lens::internal::start_current_span(h, lens::SpanGroup(static_cast<unsigned char>(options.ungated ? 0 : id)),
                                         lens::SpanName(utf8_or_empty(t->name)), {}, options)
          .pushed_to;
  PyObject* result = PyObject_Vectorcall(t->function, args, nargsf, kwnames);
  if (result == nullptr) {
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (type != nullptr && h.is_writable() && PyErr_GivenExceptionMatches(type, PyExc_Exception))
      record_python_exception(h, type, value, true, StatusText::kTypeAndMessage);
    PyErr_Restore(type, value, traceback);
  }
  if (pushed_to != nullptr) lens::internal::pop_context(pushed_to);
  if (h.is_writable()) lens::internal::end_span(h, false, 0);
  return result;
}

PyObject* traced_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"function", "group", "name", nullptr};
  PyObject *function = nullptr, *group = nullptr, *name = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOU", const_cast<char**>(keywords), &function, &group, &name))
    return nullptr;
  if (!PyCallable_Check(function)) {
    PyErr_SetString(PyExc_TypeError, "trace_fn decorates a callable");
    return nullptr;
  }
  auto* t = reinterpret_cast<TracedFunction*>(type->tp_alloc(type, 0));
  if (t == nullptr) return nullptr;
  Py_INCREF(function);
  Py_INCREF(group);
  Py_INCREF(name);
  t->function = function;
  t->group = group;
  t->name = name;
  t->dict = nullptr;
  t->vectorcall = traced_call;
  return reinterpret_cast<PyObject*>(t);
}

int traced_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* t = reinterpret_cast<TracedFunction*>(self);
  Py_VISIT(t->function);
  Py_VISIT(t->group);
  Py_VISIT(t->dict);
  return 0;
}

int traced_clear(PyObject* self) {
  auto* t = reinterpret_cast<TracedFunction*>(self);
  Py_CLEAR(t->function);
  Py_CLEAR(t->group);
  Py_CLEAR(t->name);
  Py_CLEAR(t->dict);
  return 0;
}

void traced_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  traced_clear(self);
  Py_TYPE(self)->tp_free(self);
}

// A method of a class: bound like a function, so `self` is passed.
PyObject* traced_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* traced_repr(PyObject* self) {
  auto* t = reinterpret_cast<TracedFunction*>(self);
  return PyUnicode_FromFormat("<lens.trace_fn %R of %R>", t->name, t->function);
}

PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// set_other_span_groups(names, managed_span_route, traced_span_route): see g_other_groups.
PyObject* set_other_span_groups(PyObject*, PyObject* args) {
  PyObject *names = nullptr, *managed_route = nullptr, *traced_route = nullptr;
  if (!PyArg_ParseTuple(args, "O!OO", &PyFrozenSet_Type, &names, &managed_route, &traced_route)) return nullptr;
  if (!PyCallable_Check(managed_route) || !PyCallable_Check(traced_route)) {
    PyErr_SetString(PyExc_TypeError, "set_other_span_groups: the routes are callables");
    return nullptr;
  }
  Py_INCREF(names);
  Py_INCREF(managed_route);
  Py_INCREF(traced_route);
  Py_XSETREF(g_other_groups, names);
  Py_XSETREF(g_route_managed_span, managed_route);
  Py_XSETREF(g_route_traced_span, traced_route);
  Py_RETURN_NONE;
}

PyObject* other_span_groups(PyObject*, PyObject*) {
  if (g_other_groups == nullptr) return PyFrozenSet_New(nullptr);
  Py_INCREF(g_other_groups);
  return g_other_groups;
}

PyObject* records_ungated_spans(PyObject*, PyObject*) {
  return PyBool_FromLong(lens::internal::records_ungated_spans());
}

PyObject* set_outside_catalogue_enabled(PyObject*, PyObject* on) {
  const int truth = PyObject_IsTrue(on);
  if (truth < 0) return nullptr;
  return PyBool_FromLong(lens::internal::set_outside_catalogue_enabled(truth == 1));
}

PyMethodDef functions[] = {
    {"set_other_span_groups", set_other_span_groups, METH_VARARGS,
     "set_other_span_groups(names, managed_span_route, traced_span_route): the enabled groups lens's own set does "
     "not serve (a frozenset of names) and how their spans are made where lens records nothing."},
    {"other_span_groups", other_span_groups, METH_NOARGS, "The names set_other_span_groups gave last (a frozenset)."},
    {"records_ungated_spans", records_ungated_spans, METH_NOARGS,
     "Whether a span of no group (span_cm, the OpenTelemetry API's, a group outside the catalogue) records here now."},
    {"set_outside_catalogue_enabled", set_outside_catalogue_enabled, METH_O,
     "Turns the groups outside the catalogue on or off for ungated spans; on only where the enabled set may be "
     "(an exporting rank with traces on). Returns the state now in force."},
    {"is_span_group_enabled", is_span_group_enabled, METH_O,
     "is_span_group_enabled(group) -> bool: True when `group` is enabled now (its spans are exported)."},
    {"managed_span", fastcall(managed_span), METH_FASTCALL | METH_KEYWORDS,
     "managed_span(group, name, tracer=None, **attributes): a context manager that yields the span, or None "
     "when the group is off."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool ready(PyTypeObject* type, PyObject* module, const char* attribute) {
  if (PyType_Ready(type) < 0) return false;
  Py_INCREF(type);
  return PyModule_AddObject(module, attribute, reinterpret_cast<PyObject*>(type)) == 0;
}

bool group_is_enabled(PyObject* group, int* id) { return group_enabled(group, id); }

PyObject* null_span() {
  Py_INCREF(g_null_span);
  return g_null_span;
}

void set_group_ids(PyObject* names_to_ids) {
  Py_INCREF(names_to_ids);
  Py_XSETREF(g_group_ids, names_to_ids);
  clear_group_cache();
}

PyObject* new_span(const SpanRequest& r) {
  SpanObject* s = alloc_span(r.name);
  if (s == nullptr) return nullptr;
  s->group_id = static_cast<unsigned char>(r.group_id);
  if (r.attributes != nullptr && r.attributes != Py_None) {
    Py_INCREF(r.attributes);
    s->attributes = r.attributes;
  }
  s->make_current = r.make_current;
  s->record_exception = r.record_exception;
  s->root = r.root;
  if (r.trace_id) s->trace_id = *r.trace_id, s->has_trace_id = true;
  if (r.parent) s->parent = *r.parent, s->has_parent = true;
  for (const lens::SpanContext& link : r.links)
    if (link.is_valid() && s->link_count < kMaxStartLinks) s->links[s->link_count++] = link;
  s->kind = r.kind;
  s->start_unix_nanos = r.start_unix_nanos;
  s->ungated = r.ungated;
  s->redact = r.redact;
  s->scope = r.scope;
  if (r.start_now) start(s);
  return reinterpret_cast<PyObject*>(s);
}

bool lens_span_context(PyObject* object, lens::SpanContext* context) {
  if (!Py_IS_TYPE(object, &SpanType)) return false;
  *context = reinterpret_cast<SpanObject*>(object)->h.context;
  return true;
}

PyObject* current_span_view() {
  lens::internal::SpanHandle h;
  switch (lens::internal::current_kind(&h)) {
    case lens::internal::CurrentKind::kNone:
    case lens::internal::CurrentKind::kAttached: Py_RETURN_NONE;
    case lens::internal::CurrentKind::kContext: return context_to_python(lens::current_context());
    case lens::internal::CurrentKind::kSpan: break;
  }
  static PyObject* const kName = PyUnicode_InternFromString("current span");
  SpanObject* s = alloc_span(kName);
  if (s == nullptr) return nullptr;
  s->h = h;
  s->started = s->borrowed = true;
  return reinterpret_cast<PyObject*>(s);
}

bool add_span_path(PyObject* module) {
  if (g_group_ids == nullptr && (g_group_ids = PyDict_New()) == nullptr) return false;

  NullSpanType.tp_name = "lens._native.NullSpan";
  NullSpanType.tp_basicsize = sizeof(PyObject);
  NullSpanType.tp_flags = Py_TPFLAGS_DEFAULT;
  NullSpanType.tp_doc = "What managed_span returns for a disabled group: `with` yields None.";
  NullSpanType.tp_methods = null_methods;
  if (!ready(&NullSpanType, module, "NullSpan")) return false;
  g_null_span = PyObject_New(PyObject, &NullSpanType);
  if (g_null_span == nullptr) return false;

  SpanType.tp_name = "lens.Span";
  SpanType.tp_basicsize = sizeof(SpanObject);
  SpanType.tp_flags = Py_TPFLAGS_DEFAULT;
  SpanType.tp_doc = "A span: a context manager (current inside `with`), with OpenTelemetry's Span methods.";
  SpanType.tp_dealloc = span_dealloc;
  SpanType.tp_repr = span_repr;
  SpanType.tp_methods = span_methods;
  SpanType.tp_getset = span_getset;
  if (!ready(&SpanType, module, "Span")) return false;

  TracedFunctionType.tp_name = "lens.TracedFunction";
  TracedFunctionType.tp_basicsize = sizeof(TracedFunction);
  TracedFunctionType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  TracedFunctionType.tp_doc = "A function whose calls are spans while its group is on (trace_fn).";
  TracedFunctionType.tp_new = traced_new;
  TracedFunctionType.tp_dealloc = traced_dealloc;
  TracedFunctionType.tp_traverse = traced_traverse;
  TracedFunctionType.tp_clear = traced_clear;
  TracedFunctionType.tp_call = PyVectorcall_Call;
  TracedFunctionType.tp_vectorcall_offset = offsetof(TracedFunction, vectorcall);
  TracedFunctionType.tp_descr_get = traced_get;
  TracedFunctionType.tp_dictoffset = offsetof(TracedFunction, dict);
  TracedFunctionType.tp_repr = traced_repr;
  TracedFunctionType.tp_getset = traced_getset;
  if (!ready(&TracedFunctionType, module, "TracedFunction")) return false;

  return PyModule_AddFunctions(module, functions) == 0;
}

}  // namespace lens_python
