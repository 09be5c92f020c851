// OpenTelemetry's runtime context on lens's context stack (otel_context.h says what it keeps in step).
#include "otel_context.h"

#include <cstdint>

#include "context_conversion.h"
#include "lens/span.h"
#include "spans.h"

namespace lens_python {
namespace {

using lens::internal::CurrentKind;
using lens::internal::DetachResult;

// RuntimeContext(inner, span_key, context_class, facing, with_span_context, say_under_open_spans):
//   inner: OpenTelemetry's runtime context (its context variable is used directly where it has one);
//   span_key: the key of the current span in a Context; context_class: opentelemetry.context.Context;
//   facing(lens_span): the span as OpenTelemetry's code receives it (lens.otel.OtelFacingSpan);
//   with_span_context(context, lens_span_context): `context` with a non-recording span of that context (a C++
//   ContextScope's, current alone); say_under_open_spans(): warns, once a process, of a detach under an open span.
struct RuntimeContextObject {
  PyObject_HEAD
  PyObject* inner;
  PyObject* variable;  // inner's ContextVar, or null: inner's methods are called
  PyObject* span_key;
  PyObject* context_class;
  PyObject* facing;
  PyObject* with_span_context;
  PyObject* say_under_open_spans;
  // The last Context attach made of one holding a lens span (that span as OpenTelemetry's code receives it), and
  // the one it was made of: Contexts are immutable, so the same one attached again gets the same one back.
  PyObject* attached;
  PyObject* attached_from;
  // The last Context get_current made for a lens span current after the last attach, and what it was made of:
  // a loop that asks again on the same thread, under the same span, gets the same object back.
  PyObject* made;
  PyObject* made_from;
  unsigned long made_on_thread;
  lens::SpanId made_for_span;
};

// What attach returns: OpenTelemetry's own token and where lens's push went.
struct TokenObject {
  PyObject_HEAD
  PyObject* inner;
  std::uint64_t pushed_to;  // a ThreadState*, 0: nothing pushed
  std::uint32_t depth;
};

PyTypeObject RuntimeContextType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject TokenType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// A new Context: `context` with `span` under the span key.
PyObject* context_with(RuntimeContextObject* r, PyObject* context, PyObject* span) {
  PyObject* items = PyDict_New();
  if (items == nullptr) return nullptr;
  if (PyDict_Update(items, context) < 0 || PyDict_SetItem(items, r->span_key, span) < 0) {
    Py_DECREF(items);
    return nullptr;
  }
  PyObject* made = PyObject_CallOneArg(r->context_class, items);
  Py_DECREF(items);
  return made;
}

// The span under the span key of a Context (borrowed; null: none), without raising.
PyObject* span_in(RuntimeContextObject* r, PyObject* context) {
  if (!PyDict_Check(context)) return nullptr;
  PyObject* span = PyDict_GetItemWithError(context, r->span_key);
  if (span == nullptr) PyErr_Clear();
  return span;
}

// The context lens's stack gets for an attached span: a lens span's own, OpenTelemetry's SpanContext of any other
// span; invalid (what follows is a root, as after OpenTelemetry's empty Context) for none or one without usable ids.
lens::SpanContext pushed_context_of(PyObject* span) {
  lens::SpanContext context;
  if (span == nullptr || span == Py_None) return context;
  if (lens_span_context(span, &context)) return context;
  PyObject* inner = PyObject_GetAttrString(span, "lens_span");  // an OtelFacingSpan
  if (inner != nullptr) {
    const bool is_lens = lens_span_context(inner, &context);
    Py_DECREF(inner);
    if (is_lens) return context;
  }
  PyErr_Clear();
  PyObject* ids = PyObject_CallMethod(span, "get_span_context", nullptr);
  if (ids == nullptr || ids == Py_None || !context_from_python(ids, &context)) context = lens::SpanContext{};
  Py_XDECREF(ids);
  PyErr_Clear();
  return context;
}

PyObject* inner_attach(RuntimeContextObject* r, PyObject* context) {
  if (r->variable != nullptr) return PyContextVar_Set(r->variable, context);
  return PyObject_CallMethod(r->inner, "attach", "O", context);
}

PyObject* attach(PyObject* self, PyObject* context) {
  auto* r = reinterpret_cast<RuntimeContextObject*>(self);
  PyObject* span = span_in(r, context);
  lens::SpanContext lens_context;
  PyObject* attached = nullptr;
  if (span != nullptr && lens_span_context(span, &lens_context)) {  // OpenTelemetry's code gets the facing span
    if (r->attached_from != context) {
      PyObject* facing = PyObject_CallOneArg(r->facing, span);
      PyObject* made = facing != nullptr ? context_with(r, context, facing) : nullptr;
      Py_XDECREF(facing);
      if (made == nullptr) return nullptr;
      Py_XSETREF(r->attached, made);
      Py_XSETREF(r->attached_from, Py_NewRef(context));
    }
    attached = Py_NewRef(r->attached);
  } else {
    lens_context = pushed_context_of(span);
    attached = Py_NewRef(context);
  }
  PyObject* inner_token = inner_attach(r, attached);
  Py_DECREF(attached);
  if (inner_token == nullptr) return nullptr;
  auto* token = PyObject_New(TokenObject, &TokenType);
  if (token == nullptr) {
    Py_DECREF(inner_token);
    return nullptr;
  }
  token->inner = inner_token;
  lens::internal::ThreadState* pushed_to = lens::internal::push_context(lens_context, nullptr, true);
  token->pushed_to = reinterpret_cast<std::uintptr_t>(pushed_to);
  token->depth = lens::internal::context_depth(pushed_to);
  return reinterpret_cast<PyObject*>(token);
}

// OpenTelemetry's checks first (a token used twice, or from another thread, raises, and OpenTelemetry's
// context.detach logs "Failed to detach context"); then lens's stack loses the token's entry and the attached ones
// above it, as OpenTelemetry's context variable does, never a live span's entry or another thread's.
PyObject* detach(PyObject* self, PyObject* token) {
  auto* r = reinterpret_cast<RuntimeContextObject*>(self);
  const bool ours = Py_IS_TYPE(token, &TokenType);
  PyObject* inner = ours ? reinterpret_cast<TokenObject*>(token)->inner : token;  // else: attached before lens was
  if (r->variable != nullptr) {
    if (PyContextVar_Reset(r->variable, inner) < 0) return nullptr;
  } else {
    PyObject* done = PyObject_CallMethod(r->inner, "detach", "O", inner);
    if (done == nullptr) return nullptr;
    Py_DECREF(done);
  }
  if (!ours) Py_RETURN_NONE;
  auto* t = reinterpret_cast<TokenObject*>(token);
  if (t->pushed_to == 0) Py_RETURN_NONE;
  auto* pushed_to = reinterpret_cast<lens::internal::ThreadState*>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<std::uintptr_t>(t->pushed_to));
  if (lens::internal::pop_attached_context(pushed_to, t->depth) == DetachResult::kUnderOpenSpans) {
    PyObject* said = PyObject_CallNoArgs(r->say_under_open_spans);
    if (said == nullptr) return nullptr;
    Py_DECREF(said);
  }
  Py_RETURN_NONE;
}

PyObject* inner_current(RuntimeContextObject* r) {
  if (r->variable == nullptr) return PyObject_CallMethod(r->inner, "get_current", nullptr);
  PyObject* value = nullptr;
  if (PyContextVar_Get(r->variable, nullptr, &value) < 0) return nullptr;
  if (value == nullptr) return PyObject_CallNoArgs(r->context_class);  // a variable with no default: empty
  return value;
}

// `context` with lens's current span (made current after the last attach) as OpenTelemetry's code receives it.
PyObject* with_current_span(RuntimeContextObject* r, PyObject* context, const lens::internal::SpanHandle& h) {
  const unsigned long thread = PyThread_get_thread_ident();
  if (r->made != nullptr && r->made_from == context && r->made_on_thread == thread &&
      r->made_for_span == h.context.span_id)
    return Py_NewRef(r->made);
  PyObject* view = current_span_view();
  PyObject* facing = view != nullptr ? PyObject_CallOneArg(r->facing, view) : nullptr;
  Py_XDECREF(view);
  PyObject* made = facing != nullptr ? context_with(r, context, facing) : nullptr;
  Py_XDECREF(facing);
  if (made == nullptr) return nullptr;
  Py_XSETREF(r->made, Py_NewRef(made));
  Py_XSETREF(r->made_from, Py_NewRef(context));
  r->made_on_thread = thread;
  r->made_for_span = h.context.span_id;
  return made;
}

PyObject* get_current(PyObject* self, PyObject*) {
  auto* r = reinterpret_cast<RuntimeContextObject*>(self);
  PyObject* context = inner_current(r);
  if (context == nullptr) return nullptr;
  lens::internal::SpanHandle h;
  PyObject* answer = nullptr;
  switch (lens::internal::current_kind(&h)) {
    case CurrentKind::kNone:
    case CurrentKind::kAttached: return context;  // nothing, or the last attach is on top (the common case)
    case CurrentKind::kSpan: answer = with_current_span(r, context, h); break;
    case CurrentKind::kContext: {  // a context made current alone (C++'s ContextScope)
      PyObject* alone = context_to_python(lens::current_context());
      answer = alone != nullptr ? PyObject_CallFunctionObjArgs(r->with_span_context, context, alone, nullptr) : nullptr;
      Py_XDECREF(alone);
      break;
    }
  }
  Py_DECREF(context);
  return answer;
}

PyObject* runtime_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {
      "inner", "span_key", "context_class", "facing", "with_span_context", "say_under_open_spans", nullptr};
  PyObject *inner = nullptr, *span_key = nullptr, *context_class = nullptr, *facing = nullptr,
           *with_span_context = nullptr, *say = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO", const_cast<char**>(keywords), &inner, &span_key,
                                   &context_class, &facing, &with_span_context, &say))
    return nullptr;
  auto* r = reinterpret_cast<RuntimeContextObject*>(type->tp_alloc(type, 0));
  if (r == nullptr) return nullptr;
  r->inner = Py_NewRef(inner);
  PyObject* variable = PyObject_GetAttrString(inner, "_current_context");  // OpenTelemetry's contextvars form
  if (variable != nullptr && PyContextVar_CheckExact(variable)) {
    r->variable = variable;
  } else {
    Py_XDECREF(variable);
    PyErr_Clear();
  }
  r->span_key = Py_NewRef(span_key);
  r->context_class = Py_NewRef(context_class);
  r->facing = Py_NewRef(facing);
  r->with_span_context = Py_NewRef(with_span_context);
  r->say_under_open_spans = Py_NewRef(say);
  return reinterpret_cast<PyObject*>(r);
}

void runtime_dealloc(PyObject* self) {
  auto* r = reinterpret_cast<RuntimeContextObject*>(self);
  for (PyObject* p : {r->inner, r->variable, r->span_key, r->context_class, r->facing, r->with_span_context,
                      r->say_under_open_spans, r->attached, r->attached_from, r->made, r->made_from})
    Py_XDECREF(p);
  Py_TYPE(self)->tp_free(self);
}

void token_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<TokenObject*>(self)->inner);
  PyObject_Free(self);
}

PyMethodDef runtime_methods[] = {
    {"attach", attach, METH_O, "attach(context) -> token: OpenTelemetry's, with lens's stack pushed."},
    {"detach", detach, METH_O, "detach(token): OpenTelemetry's, with lens's stack popped."},
    {"get_current", get_current, METH_NOARGS, "get_current() -> Context, with lens's current span in it."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool add_otel_context(PyObject* module) {
  RuntimeContextType.tp_name = "lens._native.RuntimeContext";
  RuntimeContextType.tp_basicsize = sizeof(RuntimeContextObject);
  RuntimeContextType.tp_flags = Py_TPFLAGS_DEFAULT;
  RuntimeContextType.tp_doc = "OpenTelemetry's runtime context kept in step with lens's context stack.";
  RuntimeContextType.tp_new = runtime_new;
  RuntimeContextType.tp_dealloc = runtime_dealloc;
  RuntimeContextType.tp_methods = runtime_methods;
  TokenType.tp_name = "lens._native.ContextToken";
  TokenType.tp_basicsize = sizeof(TokenObject);
  TokenType.tp_flags = Py_TPFLAGS_DEFAULT;
  TokenType.tp_doc = "What RuntimeContext.attach returns: OpenTelemetry's token and where lens's push went.";
  TokenType.tp_dealloc = token_dealloc;
  return ready(&RuntimeContextType, module, "RuntimeContext") && ready(&TokenType, module, "ContextToken");
}

}  // namespace lens_python
