// Light scopes: the cheapest kept span, a LENS_SPAN whose identity lives in its thread's context entry and whose data
// sits beside it (LightScope, trace/thread_state.h), exported as a scope record (trace/scope_record.h) pushed straight
// into its thread's queue when its scope ends. No slot, no arena: a Span method or an exception leaving its scope
// promotes it to a slot (trace/slot_spans.h) first. Which LENS_SPANs may be one is the drain's LightScopePolicy
// (trace/span_drain.h). A span's life by kind: docs/TRACING.md, "A span's life, by kind".
//
//   ThreadState* t = start_light_scope(h, state, group, "forward", 7, attributes);  // h.kind: kLight (or sampled out)
//   ...
//   end_light_scope_at_exit(h, *t);  // its context entry popped first
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <type_traits>

#include "common/clock.h"
#include "common/dcheck.h"
#include "groups/switch.h"
#include "lens/internal/scope_attributes.h"
#include "lens/span.h"
#include "trace/calling_thread.h"
#include "trace/scope_record.h"
#include "trace/slot_spans.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens::internal {

// Packed attributes (lens/internal/scope_attributes.h) unpacked, for the slot path.
class UnpackedAttributes {
 public:
  UnpackedAttributes(const PackedAttribute* packed, std::uint32_t count) noexcept : count_(count) {
    LENS_DCHECK(count <= kMaxScopeAttributes);
    for (std::uint32_t i = 0; i < count; ++i) new (&storage_.attributes[i]) Attribute(unpack(packed[i]));
  }
  std::span<const Attribute> view() const noexcept { return {storage_.attributes, count_}; }

 private:
  static_assert(std::is_trivially_destructible_v<Attribute>);
  union Storage {  // an Attribute has no default: the first count_ are constructed
    Storage() noexcept {}
    Attribute attributes[kMaxScopeAttributes];
  } storage_;
  std::uint32_t count_;
};

// Whether a LENS_SPAN of `group` whose literal name is `length` bytes, with packed `attributes`, may start as a light
// scope in drain `p` (null: no pipeline): the drain's LightScopePolicy admits it and its group is enabled. The one
// place the span path asks; the caller still needs its thread's state attached and room on its context stack.
LENS_ALWAYS_INLINE bool may_be_light_scope(const SpanDrain* p, SpanGroup group, std::size_t length,
                                           const ScopeAttributes& attributes) noexcept {
  return p != nullptr && p->light_scopes.admits(group, length, attributes) && is_enabled(group);
}

// The context entry of light scope `h` on the calling thread while it is open or promoted (null once it ended, or
// from a copy of its handle that outlived it: the entry is another span's then).
ContextEntry* live_light_entry(const SpanHandle& h) noexcept;

// Starts light scope `h` under `parent` (null: a root, whose trace id comes from its span id) with `trace_flags`, the
// thread's current span: its identity in its context entry, what its record needs beside it (LightScope and its
// attributes). Its handle's context is filled from the entry when first read (fill_light_context).
LENS_ALWAYS_INLINE void open_light_scope(SpanHandle& h, ThreadState& t, SpanGroup group, const char* name,
                                         std::size_t length, const ScopeAttributes& attributes,
                                         const SpanContext* parent, std::uint8_t trace_flags) noexcept {
  const int index = t.context_depth;
  ContextEntry& e = t.contexts[index];
  LightScope& scope = t.light_scopes[index];
  const SpanId span_id = t.span_ids.next_span_id();
  std::uint8_t bits = 0;
  if (parent != nullptr) {
    e.context.trace_id = parent->trace_id;
    scope.parent_span_id = parent->span_id;
    bits = static_cast<std::uint8_t>(RecordHeader::kHasParent | (parent->is_remote ? RecordHeader::kParentRemote : 0));
  } else {
    e.context.trace_id = t.span_ids.trace_id_of_root(span_id);
    scope.parent_span_id = SpanId{};
  }
  e.context.span_id = span_id;
  e.context.trace_flags = trace_flags;
  e.context.is_remote = false;
  e.span = &h;
  e.attached = false;
  e.light = LightScopeState::kOpen;
  scope.first_word =
      scope_record_first_word(attributes.count, static_cast<std::uint16_t>(length), bits, trace_flags, group.id());
  copy_packed_attributes(t.light_attributes[index], attributes.packed, attributes.count);
  scope.name = name;
  scope.start_tick = now_ticks();
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // open
  h.kind = SpanHandle::Kind::kLight;
  h.light.context_index = static_cast<std::uint32_t>(index);
  h.uncaught_at_start = *t.uncaught_exceptions;
  h.context = SpanContext{TraceId{}, span_id, trace_flags, false};  // its trace id when first read (fill_light_context)
  t.context_depth = index + 1;
}

// Starts `h`, a child of `parent` (not sampled), as the thread's current span with a context its children follow; it
// records nothing. Out of line: the light scope's start keeps no aligned frame for its entry built here. Returns `t`.
StartedSpan start_sampled_out_scope(SpanHandle& h, ThreadState& t, const SpanContext& parent) noexcept;

// Starts `h` (its group enabled and admitted by its drain's LightScopePolicy, its thread's state `t`, whose context
// stack has room) as a light scope, the thread's current span; returns `t`. Sampled out (its parent was), it records
// nothing and is made current all the same, with a context its children follow. Calls nothing on its usual path, and
// nothing but in tail position on any (a sampled-out child is started out of line).
LENS_ALWAYS_INLINE StartedSpan start_light_scope(SpanHandle& h, ThreadState& t, SpanGroup group, const char* name,
                                                 std::size_t length, const ScopeAttributes& attributes) noexcept {
  const int index = t.context_depth;
  LENS_DCHECK(index < ThreadState::kMaxContextDepth);
  const SpanContext* parent = nullptr;
  std::uint8_t trace_flags = SpanContext::kRandomFlag | SpanContext::kSampledFlag;  // a root's
  if (index > 0 && t.contexts[index - 1].context.is_valid()) {
    parent = &t.contexts[index - 1].context;
    trace_flags =
        static_cast<std::uint8_t>((parent->trace_flags & SpanContext::kRandomFlag) | SpanContext::kSampledFlag);
    if (__builtin_expect(!parent->is_sampled(), 0)) return start_sampled_out_scope(h, t, *parent);
  }
  open_light_scope(h, t, group, name, length, attributes, parent, trace_flags);
  return {&t, SpanHandle::Kind::kLight};
}

// A light scope no longer open for a hang snapshot (its seqlock even).
LENS_ALWAYS_INLINE void close_light_scope(LightScope& scope) noexcept {
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// Drops light scope `e` (of the calling thread's state `t`), counted as a span refused a slot is (dropped_no_slot):
// a Span method or an exception needed a slot, and the thread has 64 spans open. Its scope's end then does nothing;
// what its scope started keeps it as their parent.
void drop_light_scope_without_slot(ThreadState& t, ContextEntry& e) noexcept;

// Moves light scope `e` (of the calling thread's state `t`) into a slot, so a Span method can write to it; its record
// will come from the slot. Null when no slot is free.
OpenSpan* promote_light_scope(ThreadState& t, ContextEntry& e) noexcept;

// The slot a Span method writes to for light scope `h`: promoted now if need be; null once it ended, or when no slot
// is free (it is dropped then, counted).
OpenSpan* writable_light_slot(const SpanHandle& h) noexcept;

// Pushes the scope record of light scope `index` (its context entry and LightScope in `t`, with `attribute_count`
// packed attributes) ending at `end` with `more_bits`, counted as queue_record counts a span record. kFits: the caller
// saw the record fit the queue's chunk (SpanQueue::fits), so no chunk is linked and nothing is called.
template <bool kFits>
LENS_ALWAYS_INLINE SpanQueue::Push push_scope_record(ThreadState& t, std::size_t index, std::uint64_t end,
                                                     std::uint8_t more_bits, std::uint32_t attribute_count) noexcept {
  const ContextEntry& e = t.contexts[index];
  LightScope& scope = t.light_scopes[index];
  close_light_scope(scope);
  ThreadCounters::bump(t.counters.produced);
  const std::uint64_t first_word = scope.first_word | std::uint64_t{more_bits} << 32;
  auto write = [&](std::uint8_t* at) LENS_ALWAYS_INLINE_LAMBDA {
    write_scope_record(at, first_word, scope.name, scope.start_tick, end, e.context.span_id, scope.parent_span_id,
                       e.context.trace_id, t.light_attributes[index], attribute_count);
  };
  const std::uint32_t size = scope_record_bytes(attribute_count);
  return kFits ? t.queue.push_fitting(size, write) : t.queue.push_written(size, write);
}

// Queues the scope record of light scope `index` of `t` (push_scope_record) and acts on the outcome. Its thread's (or,
// while the thread is parked, the export thread's).
LENS_ALWAYS_INLINE void put_scope_record(ThreadState& t, std::size_t index, std::uint64_t end,
                                         std::uint8_t more_bits) noexcept {
  const std::uint32_t attribute_count = t.light_scopes[index].attribute_count();
  const SpanQueue::Push pushed = push_scope_record<false>(t, index, end, more_bits, attribute_count);
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

// put_scope_record out of line, for a record that needs a new chunk: the usual end then calls nothing.
void put_scope_record_in_new_chunk(ThreadState& t, std::size_t index, std::uint64_t end) noexcept;

// Ends light scope `h` in a slot: promoted before, or now for an exception or an explicit end time.
void end_light_scope_in_slot(SpanHandle& h, ThreadState& t, ContextEntry& e, std::uint64_t end, bool by_exception,
                             std::uint64_t end_unix_nanos) noexcept;

// Ends light scope `h`, whose context entry is `e` in the calling thread's state `t`, at `end` (ticks, or Unix
// nanoseconds when end_unix_nanos says so): its scope record queued, or a slot's end (above).
LENS_ALWAYS_INLINE void end_light_scope_at(SpanHandle& h, ThreadState& t, ContextEntry& e, std::uint64_t end,
                                           bool by_exception, std::uint64_t end_unix_nanos) noexcept {
  if (__builtin_expect(by_exception || end_unix_nanos != 0 || e.light != LightScopeState::kOpen, 0))
    return end_light_scope_in_slot(h, t, e, end, by_exception, end_unix_nanos);
  e.light = LightScopeState::kEnded;
  SpanDrain* p = t.drain;
  if (__builtin_expect(p->stopped(), 0)) {  // nothing will read the queue any more
    close_light_scope(t.light_scopes[h.light.context_index]);
    return p->count_late_drop();
  }
  put_scope_record(t, h.light.context_index, end, 0);
}

// The end of light scope `h` at its scope's exit when it is not simply queued (end_light_scope_at_exit below).
void end_light_scope_at_exit_out_of_line(SpanHandle& h, ThreadState& t, ContextEntry& e) noexcept;

// Ends light scope `h` at its scope's exit, its context entry just popped from `t`, the calling thread's state: its
// scope record queued. Promoted, ended early, left by an exception, after shutdown, or a clock that is a call: out of
// line, so that the usual end calls nothing but in tail position, and keeps no value across a call.
LENS_ALWAYS_INLINE void end_light_scope_at_exit(SpanHandle& h, ThreadState& t) noexcept {
  const std::uint32_t index = h.light.context_index;
  ContextEntry& e = t.contexts[index];
  if (e.span != &h) return;
  if (__builtin_expect(e.light != LightScopeState::kOpen || *t.uncaught_exceptions > h.uncaught_at_start ||
                           t.drain->stopped() || !now_ticks_is_inline(),
                       0))
    return end_light_scope_at_exit_out_of_line(h, t, e);
  const std::uint64_t end = now_ticks();  // before any store, which could alias the clock's flag: no second look
  e.light = LightScopeState::kEnded;
  const std::uint32_t attribute_count = t.light_scopes[index].attribute_count();
  if (__builtin_expect(!t.queue.fits(scope_record_bytes(attribute_count)), 0))
    return put_scope_record_in_new_chunk(t, index, end);
  // A scope without attributes takes its own copy of the push, with no size to compute.
  const SpanQueue::Push pushed = attribute_count == 0 ? push_scope_record</*kFits=*/true>(t, index, end, 0, 0)
                                                      : push_scope_record<true>(t, index, end, 0, attribute_count);
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

// The context entry that light scope `h` had on the calling thread while its scope lasts, open, promoted or ended
// early (null from a copy of its handle that outlived it).
const ContextEntry* light_entry_in_scope(const SpanHandle& h) noexcept;

}  // namespace lens::internal
