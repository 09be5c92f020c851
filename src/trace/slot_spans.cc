#include "trace/slot_spans.h"

#include <atomic>
#include <string_view>

namespace lens::internal {

void on_queue_push(ThreadState& t, SpanQueue::Push pushed) noexcept {
  if (pushed == SpanQueue::Push::kBatchMayWait && !t.queue.batch_waiting()) return;
  if (pushed == SpanQueue::Push::kDropped) ThreadCounters::bump(t.counters.dropped_queue_full);
  if (pushed == SpanQueue::Push::kQueuedPastHalf)
    t.drain->wake_exporter_now();  // at most once a chunk, and only while the queues back up
  else
    t.drain->wake_exporter();  // a full batch waits, or a span was dropped
}

void append_collective_sequence(OpenSpan& s, SpanDrain& p) noexcept {
  const std::int64_t sequence = p.collective_sequence.fetch_add(1, std::memory_order_relaxed) + 1;
  const Attribute attribute[] = {{"lens.collective.seq", sequence}};
  append_attributes(s, p.limits, attribute);
}

TraceId next_step_trace(SpanDrain& p) noexcept {
  return step_trace_id(p.step_traces.run_id, p.steps_started.fetch_add(1, std::memory_order_relaxed));
}

void place_under_step_root(RecordHeader& r, const SpanDrain& p) noexcept {
  r.parent_span_id = step_root_span_id(r.trace_id);
  r.bits |= RecordHeader::kHasParent | RecordHeader::kStepSpan |
            (p.step_traces.exports_roots ? std::uint8_t{0} : RecordHeader::kParentRemote);
}

void queue_step_root(ThreadState& t, OpenSpan& s) noexcept {
  RecordHeader& r = s.header;
  r.span_id = r.parent_span_id;
  r.parent_span_id = SpanId{};
  r.name = TextRef{"lens.step", 0, 9};
  r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  r.status_code = static_cast<std::uint8_t>(StatusCode::kUnset);
  r.bits &= RecordHeader::kStartIsUnixNanos | RecordHeader::kEndIsUnixNanos;
  r.arena_used = 0;
  r.attribute_count = r.event_count = r.link_count = 0;
  r.dropped_attributes = r.dropped_events = r.dropped_links = 0;
  r.status_message_entry = 0;
  r.scope = 0;  // lens's own
  queue_record(t, s);
}

void start_device_span(OpenSpan& s, SpanName name) noexcept {
  s.device_timed = true;
  s.nvtx_pushed = device_nvtx_push(name.text(), name.is_static());  // a literal ends with its NUL
  s.device = device_span_start();
}

void end_device_span(OpenSpan& s) noexcept {
  s.device_timed = false;
  if (s.nvtx_pushed && s.owner == t_state) device_nvtx_pop();
  s.nvtx_pushed = false;
  if (s.device == nullptr) return;
  const RecordHeader& r = s.header;
  const bool name_is_static = r.name.pointer != nullptr;
  const std::string_view name =
      name_is_static ? std::string_view(r.name.pointer, r.name.length)
                     : std::string_view(reinterpret_cast<const char*>(s.arena + r.name.offset), r.name.length);
  device_span_end(s.device, {SpanContext{r.trace_id, r.span_id, r.trace_flags, false}, r.group, name, name_is_static});
  s.device = nullptr;
}

void record_device_span(SpanDrain& p, const DeviceSpan& d, SpanName name,
                        std::span<const Attribute> attributes) noexcept {
  ThreadState* t = state_for(&p);  // the drain itself, not g_span_drain: a setup that detached still has its last ones
  if (t == nullptr) return;        // stopped: the pipeline emits before it stops the drain
  OpenSpan* s = take_slot(*t);
  if (s == nullptr) {
    ThreadCounters::bump(t->counters.produced);
    ThreadCounters::bump(t->counters.dropped_no_slot);
    return;
  }
  // Its host span's child, sampled as it was (it had a slot), its times given in Unix nanoseconds; not a span the
  // application opened, so no group gate, no sampler and no lens.collective.seq of its own.
  RecordHeader& r = s->header;
  r = RecordHeader{};
  r.trace_id = d.host.trace_id;
  r.span_id = t->span_ids.next_span_id();
  r.parent_span_id = d.host.span_id;
  r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  r.trace_flags = d.host.trace_flags;
  r.bits = RecordHeader::kHasParent | RecordHeader::kStartIsUnixNanos | RecordHeader::kEndIsUnixNanos;
  r.group = d.group;
  set_copied_name(*s, name.text());  // the arena is empty: it fits
  append_attributes(*s, p.limits, attributes);
  r.start_tick = d.start_unix_nanos;
  r.end_tick = d.end_unix_nanos;
  s->generation.store(s->generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // open
  queue_record(*t, *s);
  release_slot(*s, t);
}

}  // namespace lens::internal
