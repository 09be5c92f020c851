#include "trace/light_scopes.h"

#include <atomic>

namespace lens::internal {

namespace {

// Writes light scope `e`'s packed attributes (of the calling thread's state `t`) into slot `s` as a span's.
void unpack_light_attributes(const ThreadState& t, const ContextEntry& e, OpenSpan& s) noexcept {
  const std::size_t index = &e - t.contexts;
  const std::uint32_t count = t.light_scopes[index].attribute_count();
  if (count != 0) append_attributes(s, t.drain->limits, UnpackedAttributes(t.light_attributes[index], count).view());
}

}  // namespace

ContextEntry* live_light_entry(const SpanHandle& h) noexcept {
  ThreadState* t = t_state;
  const std::uint32_t index = h.light.context_index;
  if (t == nullptr || index >= static_cast<std::uint32_t>(ThreadState::kMaxContextDepth)) return nullptr;
  ContextEntry& e = t->contexts[index];
  const bool live = e.light == LightScopeState::kOpen || e.light == LightScopeState::kPromoted;
  return live && e.context.span_id == h.context.span_id ? &e : nullptr;
}

StartedSpan start_sampled_out_scope(SpanHandle& h, ThreadState& t, const SpanContext& parent) noexcept {
  const auto trace_flags = static_cast<std::uint8_t>(parent.trace_flags & SpanContext::kRandomFlag);
  h.kind = SpanHandle::Kind::kSampledOut;
  h.context = SpanContext{parent.trace_id, t.span_ids.next_span_id(), trace_flags, false};
  ThreadCounters::bump(t.counters.sampled_out);
  set_entry(t.contexts[t.context_depth++], h.context, &h, false);
  return {&t, SpanHandle::Kind::kSampledOut};
}

void drop_light_scope_without_slot(ThreadState& t, ContextEntry& e) noexcept {
  e.light = LightScopeState::kEnded;
  close_light_scope(t.light_scopes[&e - t.contexts]);
  if (t.drain->stopped()) return t.drain->count_late_drop();
  ThreadCounters::bump(t.counters.produced);
  ThreadCounters::bump(t.counters.dropped_no_slot);
}

OpenSpan* promote_light_scope(ThreadState& t, ContextEntry& e) noexcept {
  LightScope& scope = t.light_scopes[&e - t.contexts];
  if (e.light == LightScopeState::kPromoted) return scope.slot;
  OpenSpan* s = take_slot(t);
  if (s == nullptr) return nullptr;
  RecordHeader& r = s->header;
  r = RecordHeader{};
  r.trace_id = e.context.trace_id;
  r.span_id = e.context.span_id;
  r.parent_span_id = scope.parent_span_id;
  r.bits = scope.bits();
  r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  r.trace_flags = e.context.trace_flags;
  r.group = scope.group();
  r.name = TextRef{scope.name, 0, scope.name_length()};
  r.start_tick = scope.start_tick;
  unpack_light_attributes(t, e, *s);
  scope.slot = s;
  scope.slot_generation = s->generation.load(std::memory_order_relaxed) + 1;
  s->generation.store(scope.slot_generation, std::memory_order_release);  // open: a hang snapshot reads the slot
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // not here
  e.light = LightScopeState::kPromoted;
  return s;
}

OpenSpan* writable_light_slot(const SpanHandle& h) noexcept {
  ContextEntry* e = live_light_entry(h);
  if (e == nullptr) return nullptr;
  OpenSpan* s = promote_light_scope(*t_state, *e);
  if (__builtin_expect(s == nullptr, 0)) drop_light_scope_without_slot(*t_state, *e);
  return s;
}

void put_scope_record_in_new_chunk(ThreadState& t, std::size_t index, std::uint64_t end) noexcept {
  put_scope_record(t, index, end, 0);
}

void end_light_scope_in_slot(SpanHandle& h, ThreadState& t, ContextEntry& e, std::uint64_t end, bool by_exception,
                             std::uint64_t end_unix_nanos) noexcept {
  OpenSpan* s = promote_light_scope(t, e);
  if (s == nullptr) return drop_light_scope_without_slot(t, e);  // not exported without what made it need a slot
  e.light = LightScopeState::kEnded;
  SpanHandle slot_handle;
  slot_handle.kind = SpanHandle::Kind::kSlot;
  slot_handle.slot = {s, t.light_scopes[&e - t.contexts].slot_generation};
  slot_handle.context = e.context;
  slot_handle.uncaught_at_start = h.uncaught_at_start;
  end_slot_span(slot_handle, ending_state(*s), end, by_exception, end_unix_nanos);
}

void end_light_scope_at_exit_out_of_line(SpanHandle& h, ThreadState& t, ContextEntry& e) noexcept {
  if (e.light == LightScopeState::kEnded) return;  // ended early (Span::end), or cut at shutdown
  end_light_scope_at(h, t, e, now_ticks(), *t.uncaught_exceptions > h.uncaught_at_start, 0);
}

void truncate_open_light_scopes(ThreadState& t) noexcept {
  const std::uint64_t now = now_ticks();
  for (int i = t.context_depth - 1; i >= 0; --i) {  // innermost first
    ContextEntry& e = t.contexts[i];
    if (e.light == LightScopeState::kOpen) put_scope_record(t, i, now, RecordHeader::kTruncated);
    // A promoted one's slot is cut with the other slots.
    if (e.light == LightScopeState::kOpen || e.light == LightScopeState::kPromoted) e.light = LightScopeState::kEnded;
  }
}

const ContextEntry* light_entry_in_scope(const SpanHandle& h) noexcept {
  if (const ContextEntry* e = live_light_entry(h)) return e;
  // Ended: its entry still holds it while its scope lasts (ended early, or cut at shutdown).
  const ThreadState* t = t_state;
  const std::uint32_t index = h.light.context_index;
  if (t == nullptr || index >= static_cast<std::uint32_t>(ThreadState::kMaxContextDepth)) return nullptr;
  const ContextEntry& e = t->contexts[index];
  return e.span == &h && e.context.span_id == h.context.span_id ? &e : nullptr;
}

}  // namespace lens::internal
