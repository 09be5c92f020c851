// Batches of lens's spans as the OpenTelemetry SDK's ReadableSpans (sdk_spans.h says why they are built here).
#include "sdk_spans.h"

#include <pybind11/pybind11.h>

#include <array>
#include <atomic>
#include <span>
#include <string_view>

#include "ids.h"
#include "interpreter.h"
#include "lens/internal/span_batch.h"
#include "lens/version.h"

namespace py = pybind11;

namespace lens_python {
namespace {

using lens::internal::FinishedSpan;

py::object steal(PyObject* p) {
  if (p == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(p);
}

py::str text(std::string_view s) { return steal(PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace")); }

py::object id_int(const std::uint8_t* bytes, std::size_t size) { return steal(int_of_id(bytes, size)); }

py::object value_of(const lens::AttributeValue& v) {
  auto tuple_of = [](auto values, auto convert) {
    py::tuple t(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) t[i] = convert(values[i]);
    return py::object(std::move(t));
  };
  switch (v.type()) {
    case lens::ValueType::kBool: return py::bool_(v.as_bool());
    case lens::ValueType::kInt: return steal(PyLong_FromLongLong(v.as_int()));
    case lens::ValueType::kDouble: return steal(PyFloat_FromDouble(v.as_double()));
    case lens::ValueType::kString: return text(v.as_string());
    case lens::ValueType::kBoolArray: return tuple_of(v.as_bools(), [](bool b) { return py::bool_(b); });
    case lens::ValueType::kIntArray:
      return tuple_of(v.as_ints(), [](std::int64_t i) { return steal(PyLong_FromLongLong(i)); });
    case lens::ValueType::kDoubleArray:
      return tuple_of(v.as_doubles(), [](double d) { return steal(PyFloat_FromDouble(d)); });
    case lens::ValueType::kStringArray: return tuple_of(v.as_strings(), [](std::string_view s) { return text(s); });
  }
  return py::none();
}

py::dict attributes_of(std::span<const lens::Attribute> attributes) {
  py::dict d;
  for (const lens::Attribute& a : attributes) d[text(a.key.text())] = value_of(a.value);
  return d;
}

// The SDK's classes and constants, taken from the kit once.
struct Kit {
  explicit Kit(const py::object& kit)
      : export_(kit.attr("exporter").attr("export")),
        readable_span(kit.attr("ReadableSpan")),
        span_context(kit.attr("SpanContext")),
        trace_flags(kit.attr("TraceFlags")),
        event(kit.attr("Event")),
        link(kit.attr("Link")),
        resource(kit.attr("Resource")),
        status(kit.attr("Status")),
        success(kit.attr("SUCCESS")),
        instrumentation_scope(kit.attr("InstrumentationScope")),
        keywords(interned(kit.attr("READABLE_SPAN_PARAMETERS"))),
        fields(interned(kit.attr("READABLE_SPAN_FIELDS"))),
        tuple_trace_state(kit.attr("TUPLE_TRACE_STATE")) {
    py::sequence codes = kit.attr("STATUS_CODES"), kinds = kit.attr("SPAN_KINDS");
    for (std::size_t i = 0; i < status_codes.size(); ++i) status_codes[i] = codes[i];
    for (std::size_t i = 0; i < span_kinds.size(); ++i) span_kinds[i] = kinds[i];
    unset_status = status(status_codes[0]);
  }

  // OpenTelemetry's SpanContext of these ids (lens's are never out of range, so it is valid when both are nonzero):
  // as its own tuple where the kit says its layout holds (sdk_exporters.py).
  py::object context(const py::object& trace_id, const py::object& span_id, bool remote, const py::object& flags,
                     bool valid) {
    if (tuple_trace_state.is_none()) return span_context(trace_id, span_id, remote, flags);
    py::tuple values = py::make_tuple(trace_id, span_id, py::bool_(remote), flags, tuple_trace_state, py::bool_(valid));
    py::tuple args = py::make_tuple(values);
    return steal(PyTuple_Type.tp_new(reinterpret_cast<PyTypeObject*>(span_context.ptr()), args.ptr(), nullptr));
  }

  // Names as the interpreter's own strings: a call matches keywords to parameters, and an object's attributes to
  // its class's shared keys, by identity. None stays None.
  static py::object interned(const py::object& names) {
    if (names.is_none()) return names;
    py::tuple t(py::len(names));
    std::size_t i = 0;
    for (py::handle name : names) {
      PyObject* s = Py_NewRef(name.ptr());
      PyUnicode_InternInPlace(&s);
      t[i++] = steal(s);
    }
    return t;
  }

  // A ReadableSpan of `values` (READABLE_SPAN_PARAMETERS' order): its fields set on an object made without running
  // __init__ where the kit found that __init__ only stores them (sdk_exporters.py), else a call.
  py::object readable_span_of(const std::array<py::object, 12>& values) {
    if (fields.is_none()) {
      std::array<PyObject*, 12> args{};
      for (std::size_t i = 0; i < args.size(); ++i) args[i] = values[i].ptr();
      return steal(PyObject_Vectorcall(readable_span.ptr(), args.data(), 0, keywords.ptr()));
    }
    // object.__new__: what a call makes before __init__ (it readies the instance's dict in every CPython).
    py::object span = steal(
        PyBaseObject_Type.tp_new(reinterpret_cast<PyTypeObject*>(readable_span.ptr()), no_arguments.ptr(), nullptr));
    for (std::size_t i = 0; i < values.size(); ++i)
      if (PyObject_GenericSetAttr(span.ptr(), PyTuple_GET_ITEM(fields.ptr(), i), values[i].ptr()) < 0)
        throw py::error_already_set();
    if (PyObject_GenericSetAttr(span.ptr(), PyTuple_GET_ITEM(fields.ptr(), values.size()), Py_None) < 0)
      throw py::error_already_set();  // instrumentation_info, deprecated: None
    return span;
  }

  py::object flags(std::uint8_t value) {
    py::object& f = flag_values[value];
    if (!f) f = trace_flags(value);
    return f;
  }

  // The SDK's InstrumentationScope of a span's scope, made at its first span.
  const py::object& scope(const FinishedSpan& s) {
    py::object& made = scopes[s.scope_id];
    if (!made) made = instrumentation_scope(text(s.scope_name), text(s.scope_version));  // the SDK's '' for none
    return made;
  }

  py::object export_, readable_span, span_context, trace_flags, event, link, resource, status, success,
      instrumentation_scope, keywords, fields, tuple_trace_state, unset_status, no_arguments = py::tuple();
  std::array<py::object, lens::InstrumentationScope::kMax> scopes;
  std::array<py::object, 3> status_codes;  // UNSET, OK, ERROR
  std::array<py::object, 5> span_kinds;    // INTERNAL .. CONSUMER (OTLP's 1..5)
  std::array<py::object, 256> flag_values;
};

// One batch's objects: siblings share their parent's SpanContext, built once for a run of them.
class BatchBuilder {
 public:
  BatchBuilder(Kit& kit, py::object resource) : kit_(kit), resource_(std::move(resource)) {}

  py::object readable(const FinishedSpan& s) {
    py::object trace_id = trace_id_of(s.context.trace_id);
    py::object flags = kit_.flags(s.context.trace_flags);
    py::object context =
        kit_.context(trace_id, id_int(s.context.span_id.bytes.data(), 8), false, flags, s.context.is_valid());
    py::list events(s.events.size()), links(s.links.size());
    for (std::size_t i = 0; i < s.events.size(); ++i)
      events[i] = kit_.event(text(s.events[i].name), attributes_of(s.events[i].attributes), s.events[i].unix_nanos);
    for (std::size_t i = 0; i < s.links.size(); ++i) {
      const lens::SpanContext& c = s.links[i].context;
      py::object linked = kit_.context(id_int(c.trace_id.bytes.data(), 16), id_int(c.span_id.bytes.data(), 8),
                                       c.is_remote, kit_.flags(c.trace_flags), c.is_valid());
      links[i] = kit_.link(linked, attributes_of(s.links[i].attributes));
    }
    const int kind = static_cast<int>(s.kind) - 1;
    const std::array<py::object, 12> values{text(s.name),
                                            std::move(context),
                                            parent(s, trace_id, flags),
                                            resource_,
                                            attributes_of(s.attributes),
                                            std::move(events),
                                            std::move(links),
                                            kit_.span_kinds[kind >= 0 && kind < 5 ? kind : 0],
                                            status_of(s),
                                            steal(PyLong_FromUnsignedLongLong(s.start_unix_nanos)),
                                            steal(PyLong_FromUnsignedLongLong(s.end_unix_nanos)),
                                            kit_.scope(s)};
    return kit_.readable_span_of(values);
  }

 private:
  py::object parent(const FinishedSpan& s, const py::object& trace_id, const py::object& flags) {
    if (!s.parent_span_id.is_valid()) return py::none();
    const bool same = last_parent_ && s.context.trace_id == last_trace_ && s.parent_span_id == last_parent_id_ &&
                      s.parent_is_remote == last_remote_ && s.context.trace_flags == last_flags_;
    if (!same) {
      last_parent_ = kit_.context(trace_id, id_int(s.parent_span_id.bytes.data(), 8), s.parent_is_remote, flags,
                                  s.context.trace_id.is_valid());
      last_trace_ = s.context.trace_id;
      last_parent_id_ = s.parent_span_id;
      last_remote_ = s.parent_is_remote;
      last_flags_ = s.context.trace_flags;
    }
    return last_parent_;
  }

  py::object status_of(const FinishedSpan& s) {
    const auto code = static_cast<std::size_t>(s.status_code);
    if (code == 0 && s.status_message.empty()) return kit_.unset_status;
    return kit_.status(kit_.status_codes[code < 3 ? code : 0],
                       s.status_message.empty() ? py::object(py::none()) : py::object(text(s.status_message)));
  }

  Kit& kit_;
  // Consecutive spans of a batch are mostly of one trace: its int is made once for a run of them.
  py::object trace_id_of(const lens::TraceId& id) {
    if (!trace_id_int_ || id != trace_id_) {
      trace_id_int_ = id_int(id.bytes.data(), 16);
      trace_id_ = id;
    }
    return trace_id_int_;
  }

  py::object resource_;
  py::object trace_id_int_;
  lens::TraceId trace_id_;
  py::object last_parent_;
  lens::TraceId last_trace_;
  lens::SpanId last_parent_id_;
  bool last_remote_ = false;
  std::uint8_t last_flags_ = 0;
};

py::object resource_of(Kit& kit, const lens::ResourceAttributes& attributes) {
  py::dict d;
  for (const auto& [key, value] : attributes)
    std::visit([&, k = text(key)](const auto& v) { d[k] = py::cast(v); }, value);
  return kit.resource(d);
}

// Python's cyclic collector off while a batch's objects are made, then as it was: a collection then finds nothing
// to free (the objects all live until the export) and would cost a tenth of the bridge's time.
class CollectorPaused {
 public:
  CollectorPaused() : was_on_(PyGC_Disable() == 1) {}
  ~CollectorPaused() {
    if (was_on_) PyGC_Enable();
  }
  CollectorPaused(const CollectorPaused&) = delete;
  CollectorPaused& operator=(const CollectorPaused&) = delete;

 private:
  bool was_on_;
};

bool export_batch(Kit& kit, const lens::internal::ExportBatch& batch) {
  if (interpreter_ending()) return false;  // a late batch after the interpreter ended
  py::gil_scoped_acquire gil;
  try {
    py::list spans;
    {
      const CollectorPaused paused;
      BatchBuilder builder(kit, resource_of(kit, lens::internal::batch_resource(batch)));
      lens::internal::for_each_finished_span(batch, [&](const FinishedSpan& s) { spans.append(builder.readable(s)); });
    }
    py::object result = kit.export_(spans);
    return result.is(kit.success) || result.equal(kit.success);
  } catch (py::error_already_set& e) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      PySys_WriteStderr("lens: a span exporter raised (counted as a failed export): %s\n", e.what());
    return false;
  }
}

}  // namespace

std::function<bool(const lens::internal::ExportBatch&)> sdk_span_sink(PyObject* kit) {
  if (kit == nullptr || kit == Py_None) return {};
  auto* kept = new Kit(py::reinterpret_borrow<py::object>(kit));  // for the process's life (sdk_spans.h)
  return [kept](const lens::internal::ExportBatch& batch) { return export_batch(*kept, batch); };
}

}  // namespace lens_python
