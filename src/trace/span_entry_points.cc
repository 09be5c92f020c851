// The span entry points (lens/internal/span_entry_points.h): each finds what kind of span its handle holds and hands
// it to that kind's file. Read this first: docs/TRACING.md, "A span's life, by kind", maps a span's life per kind,
// and a span's path through the files is entry point -> trace/light_scopes.h or trace/slot_spans.h -> trace/
// arena_writer.h (a slot span's entries) -> its thread's queue (trace/span_queue.h). No lock, no read-modify-write
// atomic unless a span ends on another thread than it started; an allocation only when the thread's queue chunk is
// full (every 30-600 spans, see span_queue.h), so queue memory follows what is queued.
#include <cxxabi.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <span>
#include <string_view>
#include <typeinfo>

#include "common/clock.h"
#include "common/dcheck.h"
#include "groups/switch.h"
#include "lens/span.h"
#include "trace/arena_writer.h"
#include "trace/calling_thread.h"
#include "trace/light_scopes.h"
#include "trace/slot_spans.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens {
namespace internal {

namespace {

using Kind = SpanHandle::Kind;

LENS_ALWAYS_INLINE ThreadState* push_context_to(ThreadState* t, const SpanContext& context, const SpanHandle* span,
                                                bool attached) noexcept {
  if (t == nullptr || t->context_depth >= ThreadState::kMaxContextDepth) return nullptr;
  set_entry(t->contexts[t->context_depth++], context, span, attached);
  return t;
}

// The state the push went to, even if telemetry was shut down or set up again since.
LENS_ALWAYS_INLINE void pop_context_from(ThreadState* pushed_to) noexcept {
  if (pushed_to != nullptr && pushed_to->context_depth > 0) --pushed_to->context_depth;
}

}  // namespace

namespace {
constexpr StartOptions kDefaults{};  // a constant: a start inlined with it drops every check of the options
}  // namespace

void start_span(SpanHandle& h, SpanGroup group, SpanName name, std::span<const Attribute> attributes,
                const StartOptions& options) noexcept {
  start_slot_span(h, group, name, attributes, options);
}

void start_span(SpanHandle& h, SpanGroup group, SpanName name, std::span<const Attribute> attributes) noexcept {
  start_slot_span(h, group, name, attributes, kDefaults);
}

namespace {
// A span with no context (no pipeline, a position, refused a slot) is not current: its children keep its parent.
LENS_ALWAYS_INLINE StartedSpan make_current(SpanHandle& h, ThreadState* t) noexcept {
  return {h.has_valid_context() ? push_context_to(t, h.context, &h, false) : nullptr, h.kind};
}
}  // namespace

StartedSpan start_current_span(SpanHandle& h, SpanGroup group, SpanName name, std::span<const Attribute> attributes,
                               const StartOptions& options) noexcept {
  return make_current(h, start_slot_span(h, group, name, attributes, options));
}

StartedSpan start_current_span(SpanHandle& h, SpanGroup group, SpanName name,
                               std::span<const Attribute> attributes) noexcept {
  return make_current(h, start_slot_span(h, group, name, attributes, kDefaults));
}

namespace {
// start_current_scope's span when it cannot be a light scope: out of line, so the light scope's start keeps no frame
// for the call (its name is passed in memory).
__attribute__((noinline)) StartedSpan start_scope_as_span(SpanHandle& h, SpanGroup group, const char* name,
                                                          std::size_t length, ScopeAttributes packed) noexcept {
  return start_current_span(h, group, SpanName(LiteralText{}, std::string_view(name, length)),
                            UnpackedAttributes(packed.packed, packed.count).view());
}

// start_current_scope for a light scope that the usual path cannot take (start_scope): the thread's state to attach,
// a full context stack, or a clock that is a call. Out of line, so that the usual path makes no call.
__attribute__((noinline)) StartedSpan start_scope_out_of_line(SpanHandle& h, SpanGroup group, const char* name,
                                                              std::size_t length, ScopeAttributes attributes) noexcept {
  // The drain read again, and so everything that depends on it: telemetry may have been set up again or shut down
  // since start_scope read it.
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (may_be_light_scope(p, group, length, attributes)) {
    ThreadState* t = state_for(p);
    if (t != nullptr && t->context_depth < ThreadState::kMaxContextDepth)
      return start_light_scope(h, *t, group, name, length, attributes);
  }
  return start_scope_as_span(h, group, name, length, attributes);
}

// A LENS_SPAN's start. Its usual path, a light scope whose thread's state is already attached to the drain, with room
// on its context stack and a clock that is an instruction, calls nothing but in tail position, so it keeps no value
// across a call and spills none.
LENS_ALWAYS_INLINE StartedSpan start_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length,
                                           const ScopeAttributes& attributes) noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (__builtin_expect(!may_be_light_scope(p, group, length, attributes), 0))
    return start_scope_as_span(h, group, name, length, attributes);
  ThreadState* t = t_state;
  if (__builtin_expect(
          t != nullptr && t->drain == p && t->context_depth < ThreadState::kMaxContextDepth && now_ticks_is_inline(),
          1))
    return start_light_scope(h, *t, group, name, length, attributes);
  return start_scope_out_of_line(h, group, name, length, attributes);
}

}  // namespace

StartedSpan start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length) noexcept {
  return start_scope(h, group, name, length, ScopeAttributes{nullptr, 0, 0});
}

StartedSpan start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length,
                                ScopeAttributes attributes) noexcept {
  LENS_DCHECK(attributes.count <= kMaxScopeAttributes);
  return start_scope(h, group, name, length, attributes);
}

void end_span(SpanHandle& h, bool by_exception, std::uint64_t end_unix_nanos) noexcept {
  std::uint64_t end = end_unix_nanos != 0 ? end_unix_nanos : now_ticks();
  if (h.kind == Kind::kLight) {  // Span::end() on a LENS_SPAN_NAMED: its context stays current until the scope ends
    if (ContextEntry* e = live_light_entry(h)) end_light_scope_at(h, *t_state, *e, end, by_exception, end_unix_nanos);
    return;
  }
  if (!owns(h)) return;  // truncated at shutdown: already exported
  end_slot_span(h, ending_state(*h.slot.span), end, by_exception, end_unix_nanos);
}

void end_scope(SpanHandle& h, ThreadState* pushed_to) noexcept {
  if (__builtin_expect(h.kind == Kind::kLight, 0)) return end_light_scope(h, pushed_to);
  pop_context_from(pushed_to);
  if (!owns(h)) return;  // sampled out (no clock read for it), or truncated at shutdown: already exported
  std::uint64_t end = now_ticks();
  ThreadState* t = ending_state(*h.slot.span);
  // The ending thread's count against the starting thread's, as std::uncaught_exceptions() compares them.
  const unsigned int uncaught = t != nullptr ? *t->uncaught_exceptions : std::uncaught_exceptions();
  end_slot_span(h, t, end, uncaught > h.uncaught_at_start, 0);
}

void end_light_scope(SpanHandle& h, ThreadState* pushed_to) noexcept {
  // A light scope is always pushed (to the state it ends in, even if telemetry was set up again since).
  LENS_DCHECK(h.kind == Kind::kLight && pushed_to != nullptr);
  if (__builtin_expect(pushed_to == nullptr, 0)) return;
  LENS_DCHECK(pushed_to->is_calling_thread());  // a light scope ends on the thread it started on
  // Its entry is the top one (unless another API's contexts were pushed and not popped, or popped twice, inside
  // it): popped, and still as it was until the next push.
  pop_context_from(pushed_to);
  end_light_scope_at_exit(h, *pushed_to);
}

namespace {

// The slot a Span method writes to: the handle's own while it owns it, or a light scope's (promoted now if need be).
OpenSpan* writable_slot(const SpanHandle& h) noexcept {
  if (__builtin_expect(h.kind == Kind::kLight, 0)) return writable_light_slot(h);
  return owns(h) ? h.slot.span : nullptr;
}

}  // namespace

void update_name(SpanHandle& h, SpanName name) noexcept {
  OpenSpan* slot = writable_slot(h);
  if (slot == nullptr || h.kind == Kind::kPosition) return;
  OpenSpan& s = *slot;
  // A light scope's slot generation is kept beside its context entry, not in its handle.
  std::uint32_t& generation =
      h.kind == Kind::kLight ? t_state->light_scopes[h.light.context_index].slot_generation : h.slot.generation;
  // The name is read by hang snapshots as a seqlock: move the generation on before and after, so a snapshot
  // that overlaps the change sees it move and leaves the span out rather than read half a name.
  s.generation.exchange(generation + 2, std::memory_order_acq_rel);  // later writes stay after it (no fence: TSan)
  set_copied_name(s, name.text());                                   // no room: the old name stays
  generation += 4;
  LENS_DCHECK((generation & 1) == 1);  // still open, moved on twice so a snapshot that overlapped sees it
  s.generation.store(generation, std::memory_order_release);
}

void set_attributes(SpanHandle& h, std::span<const Attribute> attributes) noexcept {
  if (OpenSpan* s = writable_slot(h)) append_attributes(*s, s->owner->drain->limits, attributes);
}

void add_event(SpanHandle& h, SpanName name, std::span<const Attribute> attributes) noexcept {
  if (OpenSpan* s = writable_slot(h)) append_event(*s, s->owner->drain->limits, name, now_ticks(), attributes);
}

void add_link(SpanHandle& h, const SpanContext& link, std::span<const Attribute> attributes) noexcept {
  if (OpenSpan* s = writable_slot(h)) append_link(*s, s->owner->drain->limits, link, attributes);
}

void set_status(SpanHandle& h, StatusCode code, std::string_view message) noexcept {
  OpenSpan* s = writable_slot(h);
  if (s == nullptr) return;
  RecordHeader& r = s->header;
  // OpenTelemetry: Ok is final; Unset never overrides; a description only goes with Error.
  if (code == StatusCode::kUnset || r.status_code == static_cast<std::uint8_t>(StatusCode::kOk)) return;
  r.status_code = static_cast<std::uint8_t>(code);
  r.status_message_entry = 0;
  if (code == StatusCode::kError && !message.empty()) set_status_message(*s, message);
}

void record_exception(SpanHandle& h, std::string_view type, std::string_view message, bool escaped) noexcept {
  if (OpenSpan* s = writable_slot(h)) record_exception_entry(*s, s->owner->drain->limits, type, message, escaped);
}

std::string_view exception_type_name(const std::exception& e) noexcept {
  // Demangled once per type and kept: the names of exception types are few.
  const char* mangled = typeid(e).name();
  thread_local const char* last_mangled = nullptr;
  thread_local char* last_demangled = nullptr;
  if (mangled != last_mangled) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::free(last_demangled);
    last_demangled = status == 0 ? demangled : nullptr;
    last_mangled = mangled;
  }
  return last_demangled ? last_demangled : mangled;
}

ThreadState* push_context(const SpanContext& context, const SpanHandle* span, bool attached) noexcept {
  return push_context_to(current_state(), context, span, attached);
}

CurrentKind current_kind(SpanHandle* span) noexcept {
  ThreadState* t = current_state();
  if (t == nullptr || t->context_depth == 0) return CurrentKind::kNone;
  const ContextEntry& top = t->contexts[t->context_depth - 1];
  if (top.attached) return CurrentKind::kAttached;
  if (top.span == nullptr)
    return top.context.is_valid() ? CurrentKind::kContext : CurrentKind::kNone;  // not a light scope's
  *span = *top.span;
  if (top.light != LightScopeState::kNone) span->context = top.context;  // a light scope's, filled in the copy
  return CurrentKind::kSpan;
}

void pop_context(ThreadState* pushed_to) noexcept { pop_context_from(pushed_to); }

std::uint32_t context_depth(const ThreadState* pushed_to) noexcept {
  return pushed_to != nullptr ? static_cast<std::uint32_t>(pushed_to->context_depth) : 0;
}

DetachResult pop_attached_context(ThreadState* pushed_to, std::uint32_t depth) noexcept {
  if (pushed_to == nullptr || depth == 0) return DetachResult::kGone;
  if (pushed_to != current_state()) return DetachResult::kOtherThread;
  const std::uint32_t now = context_depth(pushed_to);
  if (depth > now) return DetachResult::kGone;
  for (std::uint32_t i = depth - 1; i < now; ++i)
    if (!pushed_to->contexts[i].attached) return DetachResult::kUnderOpenSpans;
  pushed_to->context_depth = static_cast<int>(depth - 1);
  return DetachResult::kPopped;
}

void fill_light_context(SpanHandle& h) noexcept {
  if (const ContextEntry* e = light_entry_in_scope(h)) h.context = e->context;
}

}  // namespace internal

SpanContext current_context() noexcept {
  internal::ThreadState* t = internal::current_state();
  if (t == nullptr || t->context_depth == 0) return {};
  return t->contexts[t->context_depth - 1].context;
}

}  // namespace lens
