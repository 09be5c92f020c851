// Spans in their general form (lens.Span); managed_span and trace_fn are the hand-written fast ones (spans.cc).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attributes.h"
#include "bindings.h"
#include "context_conversion.h"
#include "lens/span.h"
#include "spans.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// A context push as one Python int: where it went, and in the low bits the stack's depth after it (at most
// ThreadState's 128 entries). A user-space address has 47 bits, so the token fits 64.
constexpr unsigned kContextTokenDepthBits = 8;
constexpr std::uint64_t kContextTokenDepthMask = (std::uint64_t{1} << kContextTokenDepthBits) - 1;

std::uint64_t context_token(lens::internal::ThreadState* pushed_to) {
  if (pushed_to == nullptr) return 0;
  return (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pushed_to)) << kContextTokenDepthBits) |
         lens::internal::context_depth(pushed_to);
}

}  // namespace

void bind_spans(py::module_& m) {
  m.def(
      "start_span",
      [](const py::str& name, const py::object& group, const py::object& attributes,
         const std::vector<std::optional<lens::SpanContext>>& links, bool root, const std::optional<py::int_>& trace_id,
         const std::optional<lens::SpanContext>& parent, bool current, bool record_exception, bool start_now, int kind,
         std::uint64_t start_time, bool redact, std::uint16_t scope) {
        SpanRequest r;
        r.redact = redact;
        r.scope = {scope < lens::InstrumentationScope::kMax ? scope : std::uint16_t{0}};
        if (kind < static_cast<int>(lens::SpanKind::kInternal) || kind > static_cast<int>(lens::SpanKind::kConsumer))
          throw py::value_error("start_span: kind is 1 (internal) to 5 (consumer), as OTLP numbers them");
        r.kind = static_cast<lens::SpanKind>(kind);
        r.start_unix_nanos = start_time;
        if (!group.is_none() && !group_is_enabled(group.ptr(), &r.group_id))
          return py::reinterpret_steal<py::object>(null_span());
        r.ungated = group.is_none();
        r.name = name.ptr();
        r.attributes = attributes.ptr();
        r.make_current = current;
        r.record_exception = record_exception;
        r.root = root;
        for (const auto& link : links)
          if (link) r.links.push_back(*link);
        r.parent = parent;
        r.start_now = start_now;
        if (trace_id) r.trace_id = lens::TraceId{id_from_int<16>(*trace_id)};
        PyObject* s = new_span(r);
        if (s == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(s);
      },
      py::arg("name"), py::arg("group") = py::none(), py::arg("attributes") = py::none(),
      py::arg("links") = std::vector<std::optional<lens::SpanContext>>{}, py::arg("root") = false,
      py::arg("trace_id") = py::none(), py::arg("parent") = py::none(), py::arg("current") = true,
      py::arg("record_exception") = true, py::arg("start_now") = false, py::arg("kind") = 1, py::arg("start_time") = 0,
      py::arg("redact") = false, py::arg("scope") = 0);
  m.def(
      "current_span", [] { return py::reinterpret_steal<py::object>(current_span_view()); },
      "The thread's current span for OpenTelemetry's context: a Span writing to it, a SpanContext, or None "
      "(nothing, or what OpenTelemetry attached itself).");
  // OpenTelemetry's context.attach/detach on lens's context stack (lens.otel): a push returns a token of where it
  // went and how deep the stack was then, and a pop is pop_attached_context's (never another thread's entry).
  m.def(
      "push_context",
      [](const lens::SpanContext& context) {
        return context_token(lens::internal::push_context(context, nullptr, true));
      },
      "Makes `context` the thread's current one (an invalid one: no parent); returns a token for pop_context.");
  m.def(
      "pop_context",
      [](std::uint64_t token) {
        const auto depth = static_cast<std::uint32_t>(token & kContextTokenDepthMask);
        auto* pushed_to = reinterpret_cast<lens::internal::ThreadState*>(  // NOLINT(performance-no-int-to-ptr)
            static_cast<std::uintptr_t>(token >> kContextTokenDepthBits));
        return static_cast<int>(lens::internal::pop_attached_context(pushed_to, depth));
      },
      "Undoes the push_context that returned `token` and the attached contexts above it: 0 popped, 1 popped "
      "already, 2 another thread's, 3 under a span still open (nothing popped but for 0).");
}

}  // namespace lens_python
