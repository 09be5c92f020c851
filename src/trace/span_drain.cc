#include "trace/span_drain.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "common/log.h"
#include "device/device_timing.h"

namespace lens::internal {

std::atomic<SpanDrain*> g_span_drain{nullptr};

namespace {
// The bit of group `id` in a 64-bit group mask; none for -1 (no such group).
std::uint64_t group_bit(int id) { return id >= 0 ? std::uint64_t{1} << id : 0; }
}  // namespace

LightScopePolicy LightScopePolicy::of(bool sampler_decided_inline, int collective_group, int step_group,
                                      const Limits& limits) noexcept {
  return LightScopePolicy{
      .groups = sampler_decided_inline ? ~(group_bit(collective_group) | group_bit(step_group)) : 0,
      .max_attributes =
          static_cast<std::uint32_t>(std::clamp<std::int64_t>(limits.span_attribute_count, 0, kMaxScopeAttributes)),
      .max_string_length = static_cast<std::uint32_t>(std::clamp<std::int64_t>(
          limits.span_attribute_value_length.value_or(std::int64_t{kMaxScopeStringLength}), 0, kMaxScopeStringLength)),
  };
}

SpanDrain::SpanDrain(const SpanDrainSettings& settings, std::unique_ptr<Sampler> sampler_in, const Resource& resource,
                     TelemetryExporter& exporter, WakeUp& wake)
    : owned_sampler_(std::move(sampler_in)),
      sampler(owned_sampler_.get()),
      sampler_keeps_roots_and_follows_parents(keeps_roots_and_follows_parents(*sampler)),
      limits(settings.limits),
      batch_size(static_cast<std::size_t>(settings.batch.max_export_batch_size)),
      collective_group(settings.collective_group),
      step_traces(settings.step_traces),
      light_scopes(LightScopePolicy::of(sampler_keeps_roots_and_follows_parents, collective_group,
                                        step_traces.step_group, limits)),
      resource_(resource),
      exporter_(exporter),
      wake_(wake),
      queue_budget_(
          std::clamp<std::size_t>(static_cast<std::size_t>(settings.batch.max_queue_size) * kQueueBytesPerSpan,
                                  kMinQueueBytes, kMaxQueueBytes)) {
  batch_spans_.reserve(batch_size);
}

ThreadState* SpanDrain::thread_state() noexcept {
  if (stopped()) return nullptr;
  try {
    auto state = std::make_unique<ThreadState>(this, batch_size, queue_budget_);
    ThreadState* t = state.get();
    std::lock_guard lock(threads_mutex_);
    threads_.push_back(std::move(state));
    return t;
  } catch (...) {
    return nullptr;  // no memory: this thread records nothing
  }
}

std::size_t SpanDrain::thread_states() const {
  std::lock_guard lock(threads_mutex_);
  return threads_.size();
}

std::vector<ThreadState*> SpanDrain::live_threads() {
  std::lock_guard lock(threads_mutex_);
  std::vector<ThreadState*> out;
  out.reserve(threads_.size());
  for (auto& t : threads_) out.push_back(t.get());
  return out;
}

bool SpanDrain::drain_and_export(Deadline deadline) {
  bool full_batch = false;
  for (ThreadState* t : live_threads()) {
    // Read before draining: an ended thread pushed its last span before it said so.
    const bool ended = t->exited.load(std::memory_order_acquire);
    // At most what is queued now, so a producer that never pauses cannot keep a flush from ending.
    std::uint64_t available = t->queue.size();
    while (available > 0) {
      std::size_t room = batch_size - batch_spans_.size();
      std::size_t n = t->queue.pop(
          std::min<std::uint64_t>(room, available), [&](const std::uint8_t* record) { batch_spans_.push_back(record); },
          [&](SpanChunk* chunk) { retired_chunks_.push_back(chunk); });
      if (n == 0) break;
      available -= n;
      if (batch_spans_.size() >= batch_size) {
        export_batch(deadline);
        full_batch = true;
      }
    }
    if (ended) free_if_ended(t);
  }
  if (!batch_spans_.empty() || !retired_chunks_.empty()) export_batch(deadline);
  return full_batch;
}

void SpanDrain::free_if_ended(ThreadState* t) {
  // A span the thread started may still be open on another thread; its state waits for it.
  if (t->queue.size() != 0 || !t->all_slots_free()) return;
  std::unique_ptr<ThreadState> freed;
  {
    std::lock_guard lock(threads_mutex_);
    auto it = std::find_if(threads_.begin(), threads_.end(), [&](const auto& owned) { return owned.get() == t; });
    if (it == threads_.end()) return;
    ended_threads_.add(t->counters);
    // Its last records may sit in the batch being built: its chunks go when that batch has been exported, freed,
    // not recycled to a queue that is gone.
    for (SpanChunk* chunk : retired_chunks_)
      if (chunk->home == &t->queue) chunk->home = nullptr;
    t->queue.retire_all([&](SpanChunk* chunk) { retired_chunks_.push_back(chunk); });
    freed = std::move(*it);
    *it = std::move(threads_.back());
    threads_.pop_back();
  }
}

void SpanDrain::export_batch(Deadline deadline) {
  if (batch_spans_.empty()) {
    release_retired_chunks();
    return;
  }
  {
    std::lock_guard lock(count_mutex_);
    if (abandoned_) {  // counted as failed by the shutdown that gave up (stats): never sent, never counted again
      batch_spans_.clear();
      release_retired_chunks();
      return;
    }
    in_flight_.store(batch_spans_.size(), std::memory_order_release);
  }
  time_.refresh();
  ExportResult result = ExportResult::kFailure;
  try {
    result = exporter_.export_spans(ExportBatch{resource_, batch_spans_, time_}, deadline);
  } catch (const std::exception& e) {
    log_warning("span export threw: %s", e.what());
  }
  {
    std::lock_guard lock(count_mutex_);
    if (abandoned_) {
      // A shutdown that gave up on this export has counted the batch as failed already.
    } else if (result.delivered) {
      const std::uint64_t rejected = std::min<std::uint64_t>(result.rejected, batch_spans_.size());
      exported_.fetch_add(batch_spans_.size() - rejected, std::memory_order_relaxed);
      rejected_by_collector_.fetch_add(rejected, std::memory_order_relaxed);
    } else {
      dropped_export_failed_.fetch_add(batch_spans_.size(), std::memory_order_relaxed);
      export_failures_.fetch_add(1, std::memory_order_relaxed);
    }
    in_flight_.store(0, std::memory_order_release);
  }
  batch_spans_.clear();
  release_retired_chunks();
}

void SpanDrain::release_retired_chunks() noexcept {
  for (SpanChunk* chunk : retired_chunks_) {
    if (chunk->home != nullptr)
      chunk->home->recycle(chunk);
    else
      SpanChunk::free(chunk);
  }
  retired_chunks_.clear();
}

std::uint64_t SpanDrain::abandon_at_deadline() noexcept {
  stop();  // a span that starts from now on is dropped and counted where it starts
  std::lock_guard lock(count_mutex_);
  if (abandoned_) return 0;
  abandoned_ = true;
  const std::uint64_t in_flight = in_flight_.exchange(0, std::memory_order_acq_rel);
  if (in_flight > 0) {
    dropped_export_failed_.fetch_add(in_flight, std::memory_order_relaxed);
    export_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  return in_flight;
}

void SpanDrain::truncate_open_spans(ThreadState& t) noexcept {
  truncate_open_light_scopes(t);
  std::uint64_t open = ~(t.free_slots | t.remote_free.load(std::memory_order_acquire));
  OpenSpan* spans[ThreadState::kMaxOpenSpans];
  int n = 0;
  for (int i = 0; i < ThreadState::kMaxOpenSpans; ++i)
    if (open & (std::uint64_t{1} << i)) spans[n++] = &t.slots[i];
  // Innermost first: the latest started ends first (CONTRACT §6).
  std::sort(spans, spans + n, [](OpenSpan* a, OpenSpan* b) { return a->header.start_tick > b->header.start_tick; });
  std::uint64_t now = now_ticks();
  for (int i = 0; i < n; ++i) {
    OpenSpan& s = *spans[i];
    if (s.header.bits & RecordHeader::kPositionOnly) {  // a position only: forgotten, as at its end
      s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      t.free_slots |= std::uint64_t{1} << s.owner_slot_index;
      continue;
    }
    s.header.end_tick = now;
    s.header.bits |= RecordHeader::kTruncated;
    if (s.device != nullptr) device_span_abandon(s.device);  // its device end will never be recorded
    s.device = nullptr;
    s.device_timed = s.nvtx_pushed = false;  // an NVTX range of a parked thread stays open: NVTX's stack is per thread
                                             // // the exporters add the attribute and the event
    ThreadCounters::bump(t.counters.produced);
    s.header.size = static_cast<std::uint32_t>((sizeof(RecordHeader) + s.header.arena_used + 7) & ~std::size_t{7});
    if (t.queue.push(s.header, s.arena) == SpanQueue::Push::kDropped)
      ThreadCounters::bump(t.counters.dropped_queue_full);
    s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    t.free_slots |= std::uint64_t{1} << s.owner_slot_index;
  }
}

SpanStats SpanDrain::stats() const {
  SpanStats s;
  ThreadCounters total;
  {
    std::lock_guard lock(threads_mutex_);
    total.add(ended_threads_);
    for (const auto& t : threads_) {
      total.add(t->counters);
      s.queued += t->queue.size();
    }
  }
  s.produced = total.produced.load(std::memory_order_relaxed);
  s.dropped_queue_full = total.dropped_queue_full.load(std::memory_order_relaxed);
  s.dropped_no_slot = total.dropped_no_slot.load(std::memory_order_relaxed);
  s.dropped_after_shutdown = total.dropped_after_shutdown.load(std::memory_order_relaxed);
  s.sampled_out = total.sampled_out.load(std::memory_order_relaxed);
  std::uint64_t late = late_drops_.load(std::memory_order_relaxed);
  s.produced += late;
  s.dropped_after_shutdown += late;
  s.exported = exported_.load(std::memory_order_relaxed);
  s.dropped_export_failed = dropped_export_failed_.load(std::memory_order_relaxed);
  s.rejected_by_collector = rejected_by_collector_.load(std::memory_order_relaxed);
  s.export_failures = export_failures_.load(std::memory_order_relaxed);
  s.queued += in_flight_.load(std::memory_order_acquire);
  if (abandoned()) {
    // Nothing is exported or counted by the export thread any more: what is not yet accounted for (queued, in
    // the batch being built, or ended by a span open across the shutdown) is lost, and counted so here.
    const std::uint64_t accounted = s.exported + s.dropped();
    if (s.produced > accounted) s.dropped_export_failed += s.produced - accounted;
    s.queued = 0;
  }
  return s;
}

bool SpanDrain::abandoned() const {
  std::lock_guard lock(count_mutex_);
  return abandoned_;
}

namespace {

// Copies `words` 8-byte words without the library's memcpy (which ThreadSanitizer intercepts, and would report the
// seqlock's benign race through).
__attribute__((no_sanitize("thread"))) void copy_words(std::uint8_t* to, const void* from, std::size_t words) noexcept {
  const auto* source = static_cast<const std::uint64_t*>(from);
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t word = __atomic_load_n(source + i, __ATOMIC_RELAXED);
    std::memcpy(to + 8 * i, &word, 8);
  }
}

// A seqlock read of a slot its thread writes without a lock: kept only when the same open span (odd generation)
// held the slot before and after the copy. A copy torn by the span ending and the slot being reused is thrown away;
// ThreadSanitizer cannot know that, so this read is exempt from it.
__attribute__((no_sanitize("thread"))) bool copy_open_span(const OpenSpan& s, std::vector<std::uint8_t>& out) {
  static_assert(sizeof(RecordHeader) % 8 == 0);
  const std::uint32_t before = s.generation.load(std::memory_order_acquire);
  if ((before & 1) == 0) return false;
  const std::uint32_t used =
      std::min<std::uint32_t>(__atomic_load_n(&s.header.arena_used, __ATOMIC_ACQUIRE), kArenaBytes);
  const std::size_t arena_words = (used + 7) / 8;
  out.resize(sizeof(RecordHeader) + 8 * arena_words);
  copy_words(out.data(), &s.header, sizeof(RecordHeader) / 8);
  copy_words(out.data() + sizeof(RecordHeader), s.arena, arena_words);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.generation.load(std::memory_order_relaxed) != before) return false;
  std::memcpy(out.data() + offsetof(RecordHeader, arena_used), &used, sizeof used);
  return true;
}

// A seqlock read of a light scope (its context entry and LightScope), as copy_open_span reads a slot: kept only when
// the same open scope held them before and after the copy. Written out as its scope record would be, not ended.
__attribute__((no_sanitize("thread"))) bool copy_open_light_scope(const ContextEntry& e, const LightScope& scope,
                                                                  const PackedAttribute* packed_attributes,
                                                                  std::vector<std::uint8_t>& out) {
  const std::uint32_t before = scope.generation.load(std::memory_order_acquire);
  if ((before & 1) == 0) return false;
  // The context (26 bytes) as the 4 words it starts: its entry's padding follows it (the span pointer is aligned).
  static_assert(offsetof(ContextEntry, context) == 0 && offsetof(ContextEntry, span) >= 32);
  std::uint64_t context_words[4];
  copy_words(reinterpret_cast<std::uint8_t*>(context_words), &e.context, 4);
  std::uint64_t words[4];  // first_word, name, start_tick, parent_span_id
  copy_words(reinterpret_cast<std::uint8_t*>(words), &scope.first_word, 1);
  copy_words(reinterpret_cast<std::uint8_t*>(words + 1), &scope.name, 1);
  copy_words(reinterpret_cast<std::uint8_t*>(words + 2), &scope.start_tick, 1);
  copy_words(reinterpret_cast<std::uint8_t*>(words + 3), &scope.parent_span_id, 1);
  PackedAttribute attributes[kMaxScopeAttributes];
  const std::uint32_t count = std::min<std::uint32_t>(scope_record_attribute_count(words[0]), kMaxScopeAttributes);
  copy_words(reinterpret_cast<std::uint8_t*>(attributes), packed_attributes, sizeof(PackedAttribute) / 8 * count);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (scope.generation.load(std::memory_order_relaxed) != before) return false;
  SpanContext context;
  std::memcpy(&context, context_words, sizeof context);
  const char* name;
  std::memcpy(&name, &words[1], sizeof name);
  SpanId parent;
  std::memcpy(parent.bytes.data(), &words[3], 8);
  out.resize(scope_record_bytes(count));
  write_scope_record(out.data(), words[0], name, words[2], 0, context.span_id, parent, context.trace_id, attributes,
                     count);
  return true;
}

}  // namespace

void SpanDrain::add_open_light_scopes(const ThreadState& t, std::vector<OpenSpanCopy>& out) {
  for (int i = 0; i < ThreadState::kMaxContextDepth; ++i) {
    OpenSpanCopy copy{t.tid, {}};
    if (copy_open_light_scope(t.contexts[i], t.light_scopes[i], t.light_attributes[i], copy.record))
      out.push_back(std::move(copy));
  }
}

std::vector<SpanDrain::OpenSpanCopy> SpanDrain::open_spans() const {
  std::vector<OpenSpanCopy> out;
  std::lock_guard lock(threads_mutex_);  // no state is freed meanwhile
  for (const auto& t : threads_) {
    const std::size_t first = out.size();
    for (int i = 0; i < ThreadState::kMaxOpenSpans; ++i) {
      OpenSpanCopy copy{t->tid, {}};
      if (copy_open_span(t->slots[i], copy.record)) out.push_back(std::move(copy));
    }
    add_open_light_scopes(*t, out);
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), [](const auto& a, const auto& b) {
      return SpanView(a.record.data()).header().start_tick < SpanView(b.record.data()).header().start_tick;
    });
  }
  return out;
}

}  // namespace lens::internal
