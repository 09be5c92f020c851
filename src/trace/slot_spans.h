// Slot spans: a span built in one of its thread's 64 slots (OpenSpan, trace/thread_state.h), whose arena the arena
// writer fills, queued as a record when it ends; also a position (a slot only while open, for a hang snapshot) and a
// device span. Every span that is not a light scope, and a light scope once promoted. A span's life by kind:
// docs/TRACING.md, "A span's life, by kind".
//
//   ThreadState* t = start_slot_span(h, group, name, attributes, options);  // h's kind: what it became
//   ...
//   end_slot_span(h, ending_state(*h.slot.span), now_ticks(), /*by_exception=*/false, 0);
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/clock.h"
#include "common/dcheck.h"
#include "device/device_timing.h"
#include "groups/switch.h"
#include "lens/span.h"
#include "trace/arena_writer.h"
#include "trace/calling_thread.h"
#include "trace/record.h"
#include "trace/scope_record.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens::internal {

// A free slot of `t` (its thread's), or null when all 64 hold open spans.
inline OpenSpan* take_slot(ThreadState& t) noexcept {
  if (__builtin_expect(t.free_slots == 0, 0)) {
    t.free_slots = t.remote_free.exchange(0, std::memory_order_acquire);  // slots freed by other threads
    if (t.free_slots == 0) return nullptr;
  }
  int index = __builtin_ctzll(t.free_slots);
  t.free_slots &= t.free_slots - 1;
  LENS_DCHECK((t.slots[index].generation.load(std::memory_order_relaxed) & 1) == 0);  // a free slot holds no span
  return &t.slots[index];
}

// Frees slot `s` (its generation moved on: even, no span) for its thread to take again; `releasing`, the state of the
// thread that ends it, is its owner's, or another thread's that hands the slot back through remote_free.
LENS_ALWAYS_INLINE void release_slot(OpenSpan& s, ThreadState* releasing) noexcept {
  LENS_DCHECK((s.generation.load(std::memory_order_relaxed) & 1) == 1);  // odd: it held an open span
  s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  std::uint64_t bit = std::uint64_t{1} << s.owner_slot_index;
  LENS_DCHECK(releasing != s.owner || (s.owner->free_slots & bit) == 0);  // never released twice
  if (releasing == s.owner)
    s.owner->free_slots |= bit;
  else
    s.owner->remote_free.fetch_or(bit, std::memory_order_release);
}

// Whether `h` (a slot span or a position) still owns its slot: ended, or cut at shutdown, its slot moved on.
inline bool owns(const SpanHandle& h) noexcept {
  return h.kind >= SpanHandle::Kind::kSlot &&
         h.slot.span->generation.load(std::memory_order_relaxed) == h.slot.generation;
}

// What a push into `t`'s queue other than kQueued asks: a drop counted, the export thread woken.
void on_queue_push(ThreadState& t, SpanQueue::Push pushed) noexcept;

// Whether finished record `r` says nothing that a scope record (trace/scope_record.h) cannot: a literal name, an empty
// arena (no attribute, event, link, status message or copied name), nothing dropped, the default kind, status and
// instrumentation scope, and times in ticks. A plain lens::Span's, whose record is then 64 bytes, not header and arena.
LENS_ALWAYS_INLINE bool says_no_more_than_a_scope_record(const RecordHeader& r) noexcept {
  constexpr std::uint8_t kScopeRecordBits = RecordHeader::kHasParent | RecordHeader::kParentRemote;
  return r.arena_used == 0 && r.name.pointer != nullptr && r.name.length <= kMaxScopeNameLength &&
         r.kind == static_cast<std::uint8_t>(SpanKind::kInternal) && r.status_code == 0 && r.scope == 0 &&
         (r.bits & ~kScopeRecordBits) == 0 && (r.dropped_attributes | r.dropped_events | r.dropped_links) == 0;
}

// Queues a finished record from `t`'s thread (its drain live) and counts the outcome.
LENS_ALWAYS_INLINE void queue_record(ThreadState& t, OpenSpan& s) noexcept {
  ThreadCounters::bump(t.counters.produced);
  const RecordHeader& r = s.header;
  LENS_DCHECK(r.arena_used <= kArenaBytes);
  SpanQueue::Push pushed;
  if (says_no_more_than_a_scope_record(r)) {
    const std::uint64_t first_word =
        scope_record_first_word(0, static_cast<std::uint16_t>(r.name.length), r.bits, r.trace_flags, r.group);
    pushed = t.queue.push_written(kScopeRecordBytes, [&](std::uint8_t* at) LENS_ALWAYS_INLINE_LAMBDA {
      write_scope_record(at, first_word, r.name.pointer, r.start_tick, r.end_tick, r.span_id, r.parent_span_id,
                         r.trace_id, nullptr, 0);
    });
  } else {
    s.header.size = static_cast<std::uint32_t>((sizeof(RecordHeader) + r.arena_used + 7) & ~std::size_t{7});
    pushed = t.queue.push(s.header, s.arena);
  }
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

// The rank's count of communication spans so far, on this one (CONTRACT §1, lens.collective.seq). An atomic
// increment, on communication spans only: they come from any thread that talks to other ranks.
void append_collective_sequence(OpenSpan& s, SpanDrain& p) noexcept;

// What a slot span's and a position's start share once the header's ids are set: the name, the attributes (and a
// communication span's sequence number), the start time, and the slot published as open, `h` a handle of `kind`.
LENS_ALWAYS_INLINE void set_name_attributes_and_open(SpanHandle& h, SpanHandle::Kind kind, OpenSpan& s, SpanDrain& p,
                                                     SpanGroup group, SpanName name,
                                                     std::span<const Attribute> attributes,
                                                     std::uint64_t start_unix_nanos = 0) noexcept {
  RecordHeader& r = s.header;
  if (name.is_static()) {
    r.name = TextRef{name.text().data(), 0, static_cast<std::uint32_t>(name.text().size())};
  } else {
    set_copied_name(s, name.text());  // the arena is empty: it fits
  }
  if (attributes.size() != 0) append_attributes(s, p.limits, attributes);
  if (group.id() == p.collective_group) append_collective_sequence(s, p);
  h.kind = kind;
  h.slot.span = &s;
  r.start_tick = start_unix_nanos != 0 ? start_unix_nanos : now_ticks();  // kStartIsUnixNanos says which
  // Published last (odd: open), so a hang snapshot never reads a header half written.
  h.slot.generation = s.generation.load(std::memory_order_relaxed) + 1;
  LENS_DCHECK((h.slot.generation & 1) == 1);  // odd: open (the seqlock a hang snapshot reads)
  s.generation.store(h.slot.generation, std::memory_order_release);
}

// A span of a group kept only as a position (hang snapshots on, its group not enabled; CONTRACT §10): in its
// thread's slot while open, for a snapshot to see where the thread is. No ids, no sampling, no context (children
// keep the parent they would have had), never queued or counted: cheaper than an exported span.
inline void start_position(SpanHandle& h, ThreadState& t, SpanDrain& p, SpanGroup group, SpanName name,
                           std::span<const Attribute> attributes) noexcept {
  OpenSpan* s = take_slot(t);
  if (s == nullptr) return;  // a thread 64 spans deep: its position is its outer spans
  s->header = RecordHeader{};
  s->header.bits = RecordHeader::kPositionOnly;
  s->header.group = group.id();
  h.context = {};
  h.uncaught_at_start = *t.uncaught_exceptions;
  set_name_attributes_and_open(h, SpanHandle::Kind::kPosition, *s, p, group, name, attributes);
}

// The step layout (StepTraces, trace/span_drain.h): the trace of the rank's next step span.
TraceId next_step_trace(SpanDrain& p) noexcept;
// Makes step span `r` (its trace id set) a child of its step trace's root, remote but on the rank that exports it.
void place_under_step_root(RecordHeader& r, const SpanDrain& p) noexcept;
// The rank that exports step roots queues the root of ended step span `s` (queued already) from it: `lens.step`,
// the step span's times, no attributes. `s` is left to be released.
void queue_step_root(ThreadState& t, OpenSpan& s) noexcept;

// The sampler's decision (`parent`: null or valid); the default sampler's made inline, without its virtual calls.
LENS_ALWAYS_INLINE bool sampler_keeps(const SpanDrain& p, const SpanContext* parent, const TraceId& trace_id,
                                      SpanName name) noexcept {
  if (p.sampler_keeps_roots_and_follows_parents) return parent == nullptr || parent->is_sampled();
  return p.sampler->should_sample(SamplingParameters{parent, trace_id, name.text()}) ==
         SamplingDecision::kRecordAndSample;
}

// A span of a device-timed group: an NVTX range where NVTX is loaded, and its start event, after its host start.
void start_device_span(OpenSpan& s, SpanName name) noexcept;
// Records the device end of a span timed on the device, as close to its host end as the span path allows, and pops
// its NVTX range on the thread that pushed it (a span ended on another thread leaves it: NVTX's stack is per thread).
void end_device_span(OpenSpan& s) noexcept;

// Starts `h` as its group, the sampler and the slots decide: a slot span, a position (its group off, hang snapshots
// on), sampled out, or none. Returns the thread's state (null: no pipeline), where start_current_span pushes the
// context.
LENS_ALWAYS_INLINE ThreadState* start_slot_span(SpanHandle& h, SpanGroup group, SpanName name,
                                                std::span<const Attribute> attributes,
                                                const StartOptions& options) noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (p == nullptr) return nullptr;
  ThreadState* t = state_for(p);
  if (t == nullptr) return nullptr;
  const bool enabled = options.ungated ? records_ungated_spans() : is_enabled(group);
  if (!enabled) {
    start_position(h, *t, *p, group, name, attributes);
    return t;
  }

  const SpanContext* parent = nullptr;
  const bool given_trace = options.trace_id != nullptr && options.trace_id->is_valid();
  if (!options.root && !given_trace) {
    if (options.parent != nullptr)
      parent = options.parent->is_valid() ? options.parent : nullptr;
    else if (t->context_depth > 0 && t->contexts[t->context_depth - 1].context.is_valid())
      parent = &t->contexts[t->context_depth - 1].context;
  }
  const bool given_id = options.span_id != nullptr && options.span_id->is_valid();
  const SpanId span_id = given_id ? *options.span_id : t->span_ids.next_span_id();
  // A root's trace comes from a span id of the thread's own (one a given id is not).
  TraceId trace_id = parent        ? parent->trace_id
                     : given_trace ? *options.trace_id
                                   : t->span_ids.trace_id_of_root(given_id ? t->span_ids.next_span_id() : span_id);
  // The step layout: a step span is decided as a root of its step trace (the one given, else the next), and recorded
  // under the trace's root span; one given no trace id links to where it would have been. (`step_link` points where
  // `parent` did: the caller's options or this thread's context stack, unchanged until the span is open.)
  const SpanContext* step_link = nullptr;
  const bool step_span = __builtin_expect(group.id() == p->step_traces.step_group, 0) &&
                         (given_trace || StepTraces::is_step_name(name.text()));
  if (step_span) {
    step_link = parent;
    parent = nullptr;
    if (!given_trace) trace_id = next_step_trace(*p);
  }
  const bool sampled = sampler_keeps(*p, parent, trace_id, name);
  // A derived trace id is not random (W3C's random flag): the same run and iteration give the same id.
  std::uint8_t random = parent                     ? (parent->trace_flags & SpanContext::kRandomFlag)
                        : given_trace || step_span ? std::uint8_t{0}
                                                   : SpanContext::kRandomFlag;
  h.context = SpanContext{trace_id, span_id,
                          static_cast<std::uint8_t>(random | (sampled ? SpanContext::kSampledFlag : 0)), false};
  if (!sampled) {
    h.kind = SpanHandle::Kind::kSampledOut;
    ThreadCounters::bump(t->counters.sampled_out);
    return t;
  }
  OpenSpan* s = take_slot(*t);
  if (s == nullptr) {
    ThreadCounters::bump(t->counters.produced);
    ThreadCounters::bump(t->counters.dropped_no_slot);
    h.context = {};  // its children attach to its parent instead of to a span that will not exist
    return t;
  }
  h.uncaught_at_start = *t->uncaught_exceptions;
  RecordHeader& r = s->header;
  r.arena_used = 0;
  r.trace_id = h.context.trace_id;
  r.span_id = h.context.span_id;
  r.parent_span_id = parent ? parent->span_id : SpanId{};
  r.kind = static_cast<std::uint8_t>(options.kind);
  r.status_code = 0;
  r.trace_flags = h.context.trace_flags;
  r.bits =
      parent
          ? static_cast<std::uint8_t>(RecordHeader::kHasParent | (parent->is_remote ? RecordHeader::kParentRemote : 0))
          : 0;
  r.attribute_count = r.event_count = r.link_count = 0;
  r.group = group.id();
  r.dropped_attributes = r.dropped_events = r.dropped_links = 0;
  r.status_message_entry = 0;
  r.scope = options.scope.id;
  if (options.start_unix_nanos != 0) r.bits |= RecordHeader::kStartIsUnixNanos;
  if (step_span) place_under_step_root(r, *p);
  set_name_attributes_and_open(h, SpanHandle::Kind::kSlot, *s, *p, group, name, attributes, options.start_unix_nanos);
  if (step_link != nullptr) append_link(*s, p->limits, *step_link, {});
  if (__builtin_expect(device_timed(group.bit()), 0)) start_device_span(*s, name);
  return t;
}

// Where the record of a span ending on this thread goes: this thread's state in the span's drain, null once it stopped.
LENS_ALWAYS_INLINE ThreadState* ending_state(const OpenSpan& s) noexcept {
  SpanDrain* p = s.owner->drain;
  return p->stopped() ? nullptr : state_for(p);
}

// Ends slot span (or position) `h`, which owns its slot, on the calling thread (`t`: ending_state's), at `end` (ticks,
// or Unix nanoseconds when end_unix_nanos says so).
LENS_ALWAYS_INLINE void end_slot_span(SpanHandle& h, ThreadState* t, std::uint64_t end, bool by_exception,
                                      std::uint64_t end_unix_nanos) noexcept {
  OpenSpan& s = *h.slot.span;
  if (__builtin_expect(s.device_timed, 0)) end_device_span(s);
  SpanDrain* p = s.owner->drain;
  if (__builtin_expect(by_exception, 0)) {
    if (s.header.status_code != static_cast<std::uint8_t>(StatusCode::kOk)) {
      s.header.status_code = static_cast<std::uint8_t>(StatusCode::kError);
      set_status_message(s, "exception");
    }
    // Without a catch the exception object cannot be seen: its type and message come from record_exception()
    // (lens::traced() does it); otherwise the event says only that an exception left the scope.
    if (!(s.header.bits & RecordHeader::kHasException))
      record_exception_entry(s, p->limits, "unknown", "the scope was left by a C++ exception", true);
  }
  s.header.end_tick = end;
  if (end_unix_nanos != 0) s.header.bits |= RecordHeader::kEndIsUnixNanos;
  // The record goes to the ending thread's queue (a Span may end on another thread than it started).
  if (s.header.bits & RecordHeader::kPositionOnly) {
    // Kept only while open, for a hang snapshot (on a rank that exports nothing, every span is one).
  } else if (t == nullptr) {
    p->count_late_drop();
  } else {
    queue_record(*t, s);
    if (__builtin_expect(s.header.bits & RecordHeader::kStepSpan, 0) && p->step_traces.exports_roots)
      queue_step_root(*t, s);
  }
  release_slot(s, t);
  h.kind = SpanHandle::Kind::kNone;
}

}  // namespace lens::internal
