// lens/internal/span_entry_points.h: the library's span entry points that lens/span.h's inline classes call, and
// the handle a span object holds. Not for users: lens/span.h (LENS_SPAN, lens::Span) is the API. lens's Python
// package calls them too. Which kind of span a handle holds and who reads it: docs/TRACING.md, "A span's life, by
// kind".
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string_view>

#include "lens/attributes.h"
#include "lens/context.h"
#include "lens/groups.h"
#include "lens/internal/scope_attributes.h"
#include "lens/internal/visibility.h"

namespace lens {

// Declared in lens/span.h, which includes this header. Names are TextArgs (lens/span.h calls them SpanName).
struct StartOptions;
enum class StatusCode : std::uint8_t;

namespace internal {
struct OpenSpan;
struct ThreadState;
// What a Span object holds: which kind of span it is, and what that kind needs to find its data. A span's life per
// kind: docs/TRACING.md, "A span's life, by kind".
struct SpanHandle {
  // Ordered so that the kinds a Span method writes to (kLight on) and those with a slot (kSlot on) are ranges.
  enum class Kind : std::uint8_t {
    kNone,        // no span: no pipeline, its group off (and no position kept), no slot free, or ended
    kNotStarted,  // no span, and nothing but `kind` written (SpanHandle(KindOnly)): its context is none
    kSampledOut,  // records nothing; its context is its children's parent, so they follow the decision
    kLight,       // a light scope (trace/scope_record.h): its data in its thread's context entry `light.context_index`
    kSlot,        // a span built in `slot`
    kPosition,    // a position kept in `slot` while open, for a hang snapshot: no ids, never exported
  };
  // Where a slot span (or a position) is built: the slot, and the generation it opened with (the slot's seqlock:
  // odd while open; a handle whose generation is no longer the slot's owns nothing).
  struct SlotRef {
    OpenSpan* span;
    std::uint32_t generation;
  };
  // Where a light scope lives: the index of its context entry (and LightScope) on the thread that started it. A light
  // scope promoted to a slot keeps the slot and its generation there, beside the entry, so every copy of its handle
  // (current_kind's, Python's get_current_span) writes to the one slot.
  struct LightRef {
    std::uint32_t context_index;
  };

  // Every field zero: no span.
  SpanHandle() noexcept : slot{}, context{}, kind(Kind::kNone), uncaught_at_start(0) {}
  // No span, kNotStarted, and nothing else written: a start that makes it a span writes what its kind reads. For
  // LENS_SPAN, whose site then stores one byte where its group is off (ScopedSpan, lens/span.h).
  struct KindOnly {};
  explicit SpanHandle(KindOnly) noexcept : kind(Kind::kNotStarted) {}

  union {
    SlotRef slot;    // kSlot, kPosition
    LightRef light;  // kLight
  };
  union {  // a member of a union, so that SpanHandle(KindOnly) leaves it unwritten
    // Valid for kSampledOut, kSlot and kLight (a position has none). A light scope's holds its span id and flags, its
    // trace id filled in from its context entry when first read (fill_light_context).
    SpanContext context;
  };
  Kind kind;
  // std::uncaught_exceptions() on the starting thread when the span started (kSlot, kPosition, kLight): a scope left
  // with more uncaught was left by an exception (a span started in a destructor during unwinding was not).
  std::uint32_t uncaught_at_start;

  // A Span method writes somewhere: a slot, or a light scope (promoted to a slot on the first write).
  bool is_writable() const noexcept { return kind >= Kind::kLight; }
  // Its context, invalid when it has none (kNotStarted's is not written).
  bool has_valid_context() const noexcept { return kind != Kind::kNotStarted && context.is_valid(); }
  // Records a span that will be exported (its group on, the sampler kept it).
  bool records() const noexcept { return kind == Kind::kSlot || kind == Kind::kLight; }
};
// What a start that makes the span current did: where its context went (null: nowhere), for pop_context, and the kind
// of span the handle now holds (returned as well as written, so that an inlined caller knows it without a load).
struct StartedSpan {
  ThreadState* pushed_to;
  SpanHandle::Kind kind;
};
}  // namespace internal

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

namespace internal {
LENS_API void start_span(SpanHandle& h, SpanGroup group, TextArg name, std::span<const Attribute> attributes,
                         const StartOptions& options) noexcept;
// The same with the default options (lens::Span's usual case): a start with none of their checks.
LENS_API void start_span(SpanHandle& h, SpanGroup group, TextArg name, std::span<const Attribute> attributes) noexcept;
// start_span, and the span made the thread's current one when it has a context (as push_context(h.context, &h)):
// LENS_SPAN's two steps in one call.
LENS_API StartedSpan start_current_span(SpanHandle& h, SpanGroup group, TextArg name,
                                        std::span<const Attribute> attributes, const StartOptions& options) noexcept;
// The same with the default options (LENS_SPAN's case): a start with none of their checks.
LENS_API StartedSpan start_current_span(SpanHandle& h, SpanGroup group, TextArg name,
                                        std::span<const Attribute> attributes) noexcept;
// LENS_SPAN without attributes and with a literal name (`name`, `length` bytes, passed in registers): a light scope
// where it can be one (trace/scope_record.h: no slot, ended by end_light_scope), else start_current_span's span.
LENS_API StartedSpan start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length) noexcept;
// The same with attributes packed at the call site (lens/internal/scope_attributes.h): a light scope that carries them
// in its scope record where it can be one, else a span with them unpacked.
LENS_API StartedSpan start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length,
                                         ScopeAttributes attributes) noexcept;
// end_scope for a light scope (a ScopedSpan's destructor calls it directly, as end_scope does).
LENS_API void end_light_scope(SpanHandle& h, ThreadState* pushed_to) noexcept;
// end_unix_nanos: when the span ended, in Unix nanoseconds (OpenTelemetry's end_time); 0: now.
LENS_API void end_span(SpanHandle& h, bool by_exception, std::uint64_t end_unix_nanos = 0) noexcept;
// Fills in a light scope's trace id, on the thread it started on, while its scope lasts.
LENS_API void fill_light_context(SpanHandle& h) noexcept;
// Whether `h`'s context is still to be filled in: a light scope's before it is read.
inline bool context_is_deferred(const SpanHandle& h) noexcept {
  return h.kind == SpanHandle::Kind::kLight && !h.context.trace_id.is_valid();
}
// A span's object destroyed: its context popped from `pushed_to` (null: none was pushed), then the span ended, by an
// exception when the ending thread has more uncaught than when it started (the count read from the thread's state,
// not through std::uncaught_exceptions(), a call into libstdc++ and its thread-local).
LENS_API void end_scope(SpanHandle& h, ThreadState* pushed_to) noexcept;
// Renames an open span (OpenTelemetry's update_name). Handles copied from `h` before the call stop owning it.
LENS_API void update_name(SpanHandle& h, TextArg name) noexcept;
LENS_API void set_attributes(SpanHandle& h, std::span<const Attribute> attributes) noexcept;
LENS_API void add_event(SpanHandle& h, TextArg name, std::span<const Attribute> attributes) noexcept;
LENS_API void add_link(SpanHandle& h, const SpanContext& link, std::span<const Attribute> attributes) noexcept;
LENS_API void set_status(SpanHandle& h, StatusCode code, std::string_view message) noexcept;
LENS_API void record_exception(SpanHandle& h, std::string_view type, std::string_view message, bool escaped) noexcept;
LENS_API std::string_view exception_type_name(const std::exception& e) noexcept;
// Returns where the context went (null: nowhere), for pop_context. `span`: the live span whose context this is,
// when there is one (its handle is copied by current_span, so another language's API can write to the span that
// is current, as OpenTelemetry's get_current_span does); it must stay valid until the pop.
// `attached`: pushed by another API's context (OpenTelemetry Python's context.attach), which keeps the span itself.
LENS_API ThreadState* push_context(const SpanContext& context, const SpanHandle* span = nullptr,
                                   bool attached = false) noexcept;
LENS_API void pop_context(ThreadState* pushed_to) noexcept;
// How deep the calling thread's context stack is after a push that went to `pushed_to` (0 for null).
LENS_API std::uint32_t context_depth(const ThreadState* pushed_to) noexcept;
// What pop_attached_context did.
enum class DetachResult : unsigned char {
  kPopped,          // the entry, and any attached above it (as a context variable's reset forgets later values)
  kGone,            // nothing: it was popped already (with an earlier one, or twice)
  kOtherThread,     // nothing: the push was another thread's
  kUnderOpenSpans,  // nothing: a span started after it is still open above it
};
// Undoes a push of another API's context (OpenTelemetry Python's context.detach) that left the calling thread's stack
// `depth` deep: it and the entries above it go when all of them are other contexts attached (never a live span's
// entry), on the thread that pushed it (never another thread's).
LENS_API DetachResult pop_attached_context(ThreadState* pushed_to, std::uint32_t depth) noexcept;
// What is current on the calling thread: nothing, a context another API attached (it knows the span), a live
// span (its handle copied into *span: the copy writes to the span while it is open), or a context alone
// (ContextScope, a remote parent).
enum class CurrentKind : int { kNone = 0, kAttached = 1, kSpan = 2, kContext = 3 };
LENS_API CurrentKind current_kind(SpanHandle* span) noexcept;
}  // namespace internal

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens
