// lens/span.h: spans, the unit of a trace.
//
// LENS_SPAN opens a span for the rest of the scope, if its group is enabled: otherwise nothing is evaluated,
// not even the name or the attributes. The span becomes the thread's current span, so spans opened inside it
// are its children. Recording never blocks or locks: a span with a literal name and literal keys with numbers or
// literal strings is a light scope, which costs little more than two reads of the clock; an attribute that is copied
// (a std::string) puts the span in a slot, which costs more (docs/PERFORMANCE.md has today's figures). The ended span
// goes into a per-thread queue (its memory drawn, a chunk every few hundred spans, from one bounded budget per
// process) that one background thread drains; a span that does not fit is dropped and counted.
//
//   void train_step(int iteration) {
//     LENS_SPAN(lens::megatron::group::step, "megatron.train_step", {"megatron.iteration", iteration});
//     LENS_SPAN_NAMED(fb, lens::megatron::group::forward_backward, "megatron.forward_backward");
//     fb.set_attribute("megatron.num_microbatches", 8);
//     LENS_SPAN_IF(is_last_stage, lens::megatron::group::step, "megatron.loss_reduction");  // only there
//   }
//
//   lens::Span segment(lens::group::job, "megatron.train", {}, {.root = true});  // starts a new trace
//   segment.add_link(pretrain_context);
//   ... segment.end();                                                           // or at destruction
//
// A span left by a C++ exception gets status error and an `exception` event; the exception propagates
// unchanged. lens::traced() wraps a callable so each call is a span (with the exception's type and message).
//
// Compiled with LENS_DISABLED, the macros expand to nothing that runs and these types are empty no-ops; the
// macros' arguments are still type-checked (as Abseil's compiled-out logging does), never evaluated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lens/attributes.h"
#include "lens/context.h"
#include "lens/groups.h"
#include "lens/internal/scope_attributes.h"
#include "lens/internal/span_entry_points.h"
#include "lens/internal/visibility.h"

namespace lens {

enum class SpanKind : std::uint8_t { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };
enum class StatusCode : std::uint8_t { kUnset = 0, kOk = 1, kError = 2 };

// The instrumentation scope a span is recorded under (OpenTelemetry's tracer name and version; OTLP's
// InstrumentationScope), from instrumentation_scope(). The default is lens's own, `lens`.
struct InstrumentationScope {
  static constexpr std::size_t kMax = 256;  // distinct scopes a process keeps, lens's own included
  std::uint16_t id = 0;
};

struct StartOptions {
  SpanKind kind = SpanKind::kInternal;
  // The parent. nullptr: the thread's current span. An invalid context: a root span.
  const SpanContext* parent = nullptr;
  bool root = false;  // start a new trace whatever the current span is
  // A root span in this trace rather than a new random one (a trace every rank derives alike: step_trace_id).
  // Implies `root`; an invalid id is ignored. In the step layout a span of the `step` group is instead placed
  // under the trace's root, `lens.step` (CONTRACT §6).
  const TraceId* trace_id = nullptr;
  // This span's id rather than a new random one: an id its peer on another rank derives alike (derived_span_id), so
  // each end of a transfer can link to the other's span. An invalid id is ignored.
  const SpanId* span_id = nullptr;
  // When the span started, in Unix nanoseconds, for a phase that has already begun (a back-dated span, as
  // OpenTelemetry's start_time); 0: now.
  std::uint64_t start_unix_nanos = 0;
  // Recorded wherever this rank records any group's spans (internal::records_ungated_spans), whatever `group` is:
  // span_cm, the OpenTelemetry API's spans and a group outside the catalogue name no group here; `group` is still
  // the span's group in its record.
  bool ungated = false;
  // The scope the span is exported under (the tracer that made it); the default: lens's own.
  InstrumentationScope scope{};
};

#if !defined(LENS_DISABLED)
// The scope of tracer `name` at `version` (empty: none), the same for the same pair, for StartOptions::scope: spans
// started with it are exported in that scope's ScopeSpans. Takes a lock: call it when a tracer is made, not per
// span. An empty name, or `lens` at lens's version, is lens's own; past 255 distinct scopes, lens's own, with one
// warning.
LENS_API InstrumentationScope instrumentation_scope(std::string_view name, std::string_view version = {});
#else
inline InstrumentationScope instrumentation_scope(std::string_view, std::string_view = {}) { return {}; }
#endif

// A span or event name: a literal is kept as a pointer, anything else is copied when the span starts.
using SpanName = TextArg;

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

// A span that starts and ends wherever the caller says: construct to start, end() (or destroy) to end. It does
// not become the current span unless made so with ContextScope. Movable; ending twice is harmless.
class Span {
 public:
  Span() noexcept = default;
  // Its handle holds its kind alone until a start writes the rest (SpanHandle(KindOnly)).
  Span(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes = {}) noexcept
      : h_(internal::SpanHandle::KindOnly{}) {
    if (internal::is_recorded(group)) internal::start_span(h_, group, name, internal::as_span(attributes));
  }
  Span(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes,
       const StartOptions& options) noexcept
      : h_(internal::SpanHandle::KindOnly{}) {
    if (internal::is_recorded(group)) start(group, name, attributes, options);  // enabled, or a position
  }
  Span(Span&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  Span& operator=(Span&& other) noexcept {
    if (this != &other) {
      end();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { end_at_scope_exit(nullptr); }

  // True while the span records (its group was on and the sampler kept it); false for a position kept only for a
  // hang snapshot (a slot and no ids).
  bool is_recording() const noexcept { return h_.records(); }
  // The span's identity, also for a sampled-out span (children follow its decision); invalid when no span.
  const SpanContext& context() const noexcept {
    static constexpr SpanContext kNone{};
    if (h_.kind == internal::SpanHandle::Kind::kNotStarted) return kNone;
    if (internal::context_is_deferred(h_)) internal::fill_light_context(h_);
    return h_.context;
  }

  void set_attribute(AttributeKey key, AttributeValue value) noexcept {
    if (h_.is_writable()) {
      const Attribute attribute{key, value};
      internal::set_attributes(h_, {&attribute, 1});
    }
  }
  void set_attributes(std::initializer_list<Attribute> attributes) noexcept {
    if (h_.is_writable()) internal::set_attributes(h_, internal::as_span(attributes));
  }
  void add_event(SpanName name, std::initializer_list<Attribute> attributes = {}) noexcept {
    if (h_.is_writable()) internal::add_event(h_, name, internal::as_span(attributes));
  }
  void add_link(const SpanContext& link, std::initializer_list<Attribute> attributes = {}) noexcept {
    if (h_.is_writable()) internal::add_link(h_, link, internal::as_span(attributes));
  }
  void set_status(StatusCode code, std::string_view message = {}) noexcept {
    if (h_.is_writable()) internal::set_status(h_, code, message);
  }
  // The OpenTelemetry `exception` event: exception.type (demangled) and exception.message (what()).
  void record_exception(const std::exception& e, bool escaped = false) noexcept {
    if (h_.is_writable()) internal::record_exception(h_, internal::exception_type_name(e), e.what(), escaped);
  }
  void end() noexcept { end_now(false); }
  // Ends it at a time already past, in Unix nanoseconds (a back-dated span, as OpenTelemetry's end_time); 0: now.
  void end_at(std::uint64_t end_unix_nanos) noexcept {
    if (h_.is_writable()) internal::end_span(h_, false, end_unix_nanos);
    mark_ended();
  }

  // Starts an inert span (the LENS_SPAN macro, after it checked the group).
  void start(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes = {},
             const StartOptions& options = {}) noexcept {
    internal::start_span(h_, group, name, internal::as_span(attributes), options);
  }

 protected:
  // A Span whose handle holds nothing but its kind (kNotStarted) until start(): ScopedSpan's.
  explicit Span(internal::SpanHandle::KindOnly kind_only) noexcept : h_(kind_only) {}
  // start(), the span then the thread's current one: where its context went, for pop_context, and its kind.
  internal::StartedSpan start_as_current(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes,
                                         const StartOptions& options) noexcept {
    return internal::start_current_span(h_, group, name, internal::as_span(attributes), options);
  }
  // Always inlined: only at the call site are the attributes' kinds constants.
  LENS_ALWAYS_INLINE internal::StartedSpan start_as_current(SpanGroup group, SpanName name,
                                                            std::initializer_list<Attribute> attributes) noexcept {
    // Chosen here, where the compiler knows the count, whether the name is a literal, and each attribute's kind: the
    // checks fold to constants, and a span that cannot be a light scope pays nothing for them.
    if (name.is_static()) {
      if (attributes.size() == 0)
        return internal::start_current_scope(h_, group, name.text().data(), name.text().size());
      if (internal::are_packable(attributes)) {
        internal::PackedAttribute packed[internal::kMaxScopeAttributes];  // the first attributes.size() written
        internal::pack_list(attributes, packed);
        return internal::start_current_scope(
            h_, group, name.text().data(), name.text().size(),
            {packed, static_cast<std::uint32_t>(attributes.size()), internal::longest_string(attributes)});
      }
    }
    return internal::start_current_span(h_, group, name, internal::as_span(attributes));
  }
  const internal::SpanHandle& handle() const noexcept { return h_; }
  void end_now(bool by_exception) noexcept {
    if (h_.is_writable()) internal::end_span(h_, by_exception);
    mark_ended();
  }
  // No span any more, whatever it held: for a Span that is being destroyed.
  void forget() noexcept { h_.kind = internal::SpanHandle::Kind::kNone; }
  // Whether a start ran (ScopedSpan's).
  bool started() const noexcept { return h_.kind != internal::SpanHandle::Kind::kNotStarted; }
  // The kind a start returned, stored again where the inlined caller sees it (ScopedSpan).
  void note_kind(internal::SpanHandle::Kind kind) noexcept { h_.kind = kind; }
  // No span any more; its context stays readable (a link to an ended span), none where it never had one.
  void mark_ended() noexcept {
    if (h_.kind != internal::SpanHandle::Kind::kNotStarted) h_.kind = internal::SpanHandle::Kind::kNone;
  }
  // The destructor's end: the context popped from `pushed_to` (start_as_current's), then the span ended, by an
  // exception if one is leaving the scope. One call for both.
  void end_at_scope_exit(internal::ThreadState* pushed_to) noexcept {
    if (h_.kind == internal::SpanHandle::Kind::kLight)
      internal::end_light_scope(h_, pushed_to);  // not through end_scope: one call, not two
    else if (h_.kind >= internal::SpanHandle::Kind::kSlot || pushed_to)
      internal::end_scope(h_, pushed_to);
    h_.kind = internal::SpanHandle::Kind::kNone;
  }

 private:
  mutable internal::SpanHandle h_;  // mutable: a light scope's ids are derived when first read (context())
};

// Makes a context the thread's current one for a scope: spans started inside become its children. Use it to
// carry a context into a thread pool or a data loader worker (capture with current_context()).
class ContextScope {
 public:
  explicit ContextScope(const SpanContext& context) noexcept : pushed_to_(internal::push_context(context)) {}
  ~ContextScope() {
    if (pushed_to_) internal::pop_context(pushed_to_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  internal::ThreadState* pushed_to_;
};

// The span of LENS_SPAN: a Span that is the thread's current span until the scope ends.
//
// Where its group is off, LENS_SPAN's site is one load, one branch and one store (its handle's kind): the rest of the
// handle, and where its context went, are written only by a start, and the kind the start returns is stored again after
// its call, so at the scope's end the compiler knows on each path what the handle holds and, where nothing is called
// inside the scope, the off path skips the end altogether.
class ScopedSpan : public Span {
 public:
  ScopedSpan() noexcept : Span(internal::SpanHandle::KindOnly{}) {}
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// pushed_to_ is read only once a start wrote it. Where a call inside the scope makes GCC read the kind again, it no
// longer sees that, and initializing it would cost a disabled site a second store.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  ~ScopedSpan() {  // the Span base then has nothing left to end
    if (started())
      end_at_scope_exit(pushed_to_);
    else
      forget();  // known here, where a call inside the scope makes the compiler read the kind again
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  LENS_ALWAYS_INLINE void start(SpanGroup group, SpanName name,
                                std::initializer_list<Attribute> attributes = {}) noexcept {
    const internal::StartedSpan started = start_as_current(group, name, attributes);
    pushed_to_ = started.pushed_to;
    note_kind(started.kind);
  }
  void start(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes,
             const StartOptions& options) noexcept {
    const internal::StartedSpan started = start_as_current(group, name, attributes, options);
    pushed_to_ = started.pushed_to;
    note_kind(started.kind);
  }

 private:
  internal::ThreadState* pushed_to_;  // written by start(): read only once started
};

// The thread's current span context (invalid when none).
LENS_API SpanContext current_context() noexcept;

// Wraps a callable so that each call is a span of `group` named `name`, the group checked at every call. An
// exception leaving the call is recorded (type and message) and rethrown unchanged.
template <typename F>
auto traced(SpanGroup group, SpanName name, F fn) {
  return [group, name, fn = std::move(fn)](auto&&... args) mutable -> decltype(auto) {
    if (!internal::is_recorded(group)) return fn(std::forward<decltype(args)>(args)...);
    ScopedSpan span;
    span.start(group, name);
    try {
      return fn(std::forward<decltype(args)>(args)...);
    } catch (const std::exception& e) {
      span.record_exception(e, /*escaped=*/true);
      throw;
    }
  };
}

#else  // LENS_DISABLED: empty no-ops.

class Span {
 public:
  Span() noexcept = default;
  Span(SpanGroup, SpanName, std::initializer_list<Attribute> = {}, const StartOptions& = {}) noexcept {}
  bool is_recording() const noexcept { return false; }
  SpanContext context() const noexcept { return {}; }
  void set_attribute(AttributeKey, AttributeValue) noexcept {}
  void set_attributes(std::initializer_list<Attribute>) noexcept {}
  void add_event(SpanName, std::initializer_list<Attribute> = {}) noexcept {}
  void add_link(const SpanContext&, std::initializer_list<Attribute> = {}) noexcept {}
  void set_status(StatusCode, std::string_view = {}) noexcept {}
  void record_exception(const std::exception&) noexcept {}
  void end() noexcept {}
  void end_at(std::uint64_t) noexcept {}
  void start(SpanGroup, SpanName, std::initializer_list<Attribute> = {}, const StartOptions& = {}) noexcept {}
};
class ScopedSpan : public Span {};
class ContextScope {
 public:
  explicit ContextScope(const SpanContext&) noexcept {}
};
inline SpanContext current_context() noexcept { return {}; }
template <typename F>
auto traced(SpanGroup, SpanName, F fn) {
  return fn;
}

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens

#define LENS_INTERNAL_CONCAT2(a, b) a##b
#define LENS_INTERNAL_CONCAT(a, b) LENS_INTERNAL_CONCAT2(a, b)

#if !defined(LENS_DISABLED)
// A span for the rest of the scope, named `var` so the scope can add to it.
#define LENS_SPAN_NAMED(var, group, name, ...) \
  ::lens::ScopedSpan var;                      \
  if (LENS_GROUP_ENABLED(group)) var.start(group, name, {__VA_ARGS__})
// The same, recorded only when `cond` holds too (evaluated only when the group is enabled):
// LENS_SPAN_NAMED_IF(span, rank == 0, group, "name", ...).
#define LENS_SPAN_NAMED_IF(var, cond, group, name, ...) \
  ::lens::ScopedSpan var;                               \
  if (LENS_GROUP_ENABLED(group) && (cond)) var.start(group, name, {__VA_ARGS__})
#else
namespace lens::internal {
// Never defined: named only inside sizeof, so a compiled-out span's arguments are still parsed and type-checked
// (a misspelled group or an undeclared name is an error, a variable used only in a span is used) but never
// evaluated, and no lens symbol is referenced.
char check_span_arguments(SpanGroup group, SpanName name, std::initializer_list<Attribute> attributes) noexcept;
char check_condition(bool condition) noexcept;
}  // namespace lens::internal
#define LENS_SPAN_NAMED(var, group, name, ...) \
  [[maybe_unused]] ::lens::ScopedSpan var;     \
  static_cast<void>(sizeof(::lens::internal::check_span_arguments(group, name, {__VA_ARGS__})))
#define LENS_SPAN_NAMED_IF(var, cond, group, name, ...)               \
  [[maybe_unused]] ::lens::ScopedSpan var;                            \
  static_cast<void>(sizeof(::lens::internal::check_condition(cond)) + \
                    sizeof(::lens::internal::check_span_arguments(group, name, {__VA_ARGS__})))
#endif

// A span for the rest of the scope: LENS_SPAN(group, "name", {"key", value}, ...).
#define LENS_SPAN(group, name, ...) \
  LENS_SPAN_NAMED(LENS_INTERNAL_CONCAT(lens_span_, __LINE__), group, name __VA_OPT__(, ) __VA_ARGS__)
// The same, recorded only when `cond` holds too: LENS_SPAN_IF(is_last_stage, group, "name", ...).
#define LENS_SPAN_IF(cond, group, name, ...) \
  LENS_SPAN_NAMED_IF(LENS_INTERNAL_CONCAT(lens_span_, __LINE__), cond, group, name __VA_OPT__(, ) __VA_ARGS__)
