// The queue of ended spans of one thread: a single-producer single-consumer chain of chunks, so its memory is
// what is queued (plus one chunk), bounded per process by a QueueBudget shared by every thread's queue. The bound
// is in bytes, not spans: a burst of small spans fits where OTEL_BSP_MAX_QUEUE_SIZE spans of the largest would.
//
// The producer (the training thread) copies each ended span's record into its current chunk and publishes it
// with one release store; when the chunk is full it links a new one, sized to how far the queue is backed up
// (4 KiB while the export thread keeps up, doubling to 64 KiB while it does not). The consumer (the export
// thread) reads records in place: a batch holds pointers into the chunks, and a chunk it has read to the end is
// handed back (`retired`) once that batch is exported, so nothing is copied on the way out. An exported chunk
// goes back to its producer (recycle) to be linked again: a chunk freed on the export thread and allocated on
// the training thread would cost both threads malloc's arena lock, fresh pages faulted in and, when the allocator
// trims them, TLB shootdowns across the cores.
//
// The wake-up: push() says when a full batch may be waiting (a span costs one compare against `next_check_`), and
// batch_waiting() then says whether one is, from the consumer's true position, not a cached guess, at most once per
// batch. Two calls, so that the span's end calls nothing on its usual path: a call there costs it the values kept
// across the call, saved and spilled.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dcheck.h"
#include "trace/record.h"
#include "trace/scope_record.h"

namespace lens::internal {

// Queue memory of all the threads of one pipeline: chunks beyond each thread's first are taken from it.
class QueueBudget {
 public:
  explicit QueueBudget(std::size_t bytes) noexcept : limit_(bytes) {}
  // Producer, for a new chunk: false when it would pass the limit.
  bool take(std::size_t bytes) noexcept;
  // Consumer, when a chunk is freed.
  void give(std::size_t bytes) noexcept {
    [[maybe_unused]] const std::size_t before = in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    LENS_DCHECK(before >= bytes);  // only what was taken comes back
  }
  bool past_half() const noexcept { return in_use_.load(std::memory_order_relaxed) > limit_ / 2; }
  std::size_t in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  std::size_t limit() const noexcept { return limit_; }

 private:
  const std::size_t limit_;
  std::atomic<std::size_t> in_use_{0};
};

class SpanQueue;

// A run of records from the front, and from the back an index of their offsets (u32, the first record's last), so
// the consumer finds every record without reading it: a record is written on the producer's core, and reading its
// size to step to the next one would cost the export thread a cache miss per span. `written` is the producer's
// published count of records; `next` is set only once the chunk is full, after its last record was published.
struct alignas(16) SpanChunk {
  static constexpr std::uint32_t kSmallest = 4 << 10;
  static constexpr std::uint32_t kLargest = 64 << 10;
  static_assert(kSmallest >= sizeof(RecordHeader) + kArenaBytes + 8 + sizeof(std::uint32_t),
                "the largest record and its index entry fit the smallest chunk");

  // The consumer's position is kept in the queue, not here: the line with `written` is read by the consumer and
  // written by the producer, and nothing else on it changes while the chunk is in use.
  std::atomic<SpanChunk*> next{nullptr};
  std::atomic<std::uint32_t> written{0};  // records published
  std::uint32_t capacity = 0;             // bytes of records and index after this header
  QueueBudget* budget = nullptr;          // the budget it was taken from; null for a thread's first chunk
  // The queue it is recycled to once exported; null once that queue is going away (SpanQueue::retire_all).
  SpanQueue* home = nullptr;
  SpanChunk* next_spare = nullptr;  // in the queue's list of returned or spare chunks

  std::uint8_t* data() noexcept { return reinterpret_cast<std::uint8_t*>(this + 1); }
  // Where record `i`'s offset is kept.
  std::uint8_t* index_entry(std::uint32_t i) noexcept { return data() + capacity - 4 * (std::size_t{i} + 1); }
  // Null when there is no memory or the budget is spent.
  static SpanChunk* make(std::uint32_t capacity, QueueBudget* budget) noexcept;
  static void free(SpanChunk* chunk) noexcept;
};

class SpanQueue {
 public:
  // kBatchMayWait: queued, and a full batch may be waiting: ask batch_waiting(). kQueuedPastHalf: this record took
  // a new chunk and the budget is past half: the consumer must come now, even while it pauses between drains
  // (SpanDrain::wake_exporter_now).
  enum class Push : std::uint8_t { kQueued, kBatchMayWait, kQueuedPastHalf, kDropped };

  // `wake_every` is the batch size. Throws std::bad_alloc when the first chunk cannot be had.
  SpanQueue(std::uint64_t wake_every, QueueBudget& budget);
  SpanQueue(const SpanQueue&) = delete;
  ~SpanQueue();  // frees every chunk not retired

  // Producer: copies one span record (header + arena) in.
  LENS_ALWAYS_INLINE Push push(const RecordHeader& header, const std::uint8_t* arena) noexcept {
    LENS_DCHECK(header.size % 8 == 0 && header.size >= sizeof header + header.arena_used);  // 8-aligned
    return push_written(header.size, [&](std::uint8_t* at) {
      std::memcpy(at, &header, sizeof header);
      // A span without attributes has an empty arena: no call into memcpy for nothing.
      if (header.arena_used != 0) std::memcpy(at + sizeof header, arena, header.arena_used);
    });
  }
  // Producer: one record of `size` bytes (a multiple of 8: a span record, or a scope record), written by write(at).
  template <typename Write>
  LENS_ALWAYS_INLINE Push push_written(std::uint32_t size, Write&& write) noexcept {
    bool budget_past_half = false;
    if (__builtin_expect(!fits(size), 0)) {
      if (!link_new_chunk(size)) return Push::kDropped;
      budget_past_half = budget_.past_half();
    }
    const Push pushed = push_fitting(size, write);  // one copy inlined, whichever way it came
    return __builtin_expect(budget_past_half, 0) ? Push::kQueuedPastHalf : pushed;
  }
  // Producer: whether a record of `size` bytes fits the chunk being written (push_fitting then calls nothing).
  LENS_ALWAYS_INLINE bool fits(std::uint32_t size) const noexcept {
    return write_at_ + size + 4 * (std::size_t{tail_records_} + 1) <= tail_capacity_;
  }
  // Producer: push_written for a record that fits(): no chunk to link, no call.
  template <typename Write>
  LENS_ALWAYS_INLINE Push push_fitting(std::uint32_t size, Write&& write) noexcept {
    LENS_DCHECK(size % 8 == 0 && size >= kScopeRecordBytes);
    LENS_DCHECK(fits(size));  // never into the index
    // In locals before the record is written: its bytes may alias anything, so the compiler would load each of these
    // again after it.
    const std::uint64_t pushed = pushed_.load(std::memory_order_relaxed);
    SpanChunk* const tail = tail_;
    LENS_DCHECK(tail->capacity == tail_capacity_);
    const std::uint32_t offset = write_at_, records = tail_records_ + 1;
    std::uint8_t* const index_entry = tail->data() + tail_capacity_ - 4 * std::size_t{records};
    const std::uint64_t next_check = next_check_;
    write(tail->data() + offset);
    std::memcpy(index_entry, &offset, 4);
    write_at_ = offset + size;
    tail_records_ = records;
    tail->written.store(records, std::memory_order_release);
    pushed_.store(pushed + 1, std::memory_order_release);
    if (__builtin_expect(pushed + 1 >= next_check, 0)) return Push::kBatchMayWait;
    return Push::kQueued;
  }
  // Producer, after kBatchMayWait: whether a full batch is waiting, so the consumer must be woken. True at most once
  // per batch: it moves the next check on.
  bool batch_waiting() noexcept;

  // Consumer: calls on_record(record) for up to `max` records, in order, and on_retired(chunk) for each chunk
  // read to its end (free it with SpanChunk::free once no batch points into it). Returns the records read.
  template <typename OnRecord, typename OnRetired>
  std::size_t pop(std::size_t max, OnRecord&& on_record, OnRetired&& on_retired);

  // Consumer, once the producer has gone for good: hands every chunk still held to on_retired, to be freed (not
  // recycled: the queue is going away).
  template <typename OnRetired>
  void retire_all(OnRetired&& on_retired) {
    while (head_ != nullptr) {
      SpanChunk* next = head_->next.load(std::memory_order_acquire);
      head_->home = nullptr;
      on_retired(head_);
      head_ = next;
    }
  }

  // Consumer: gives an exported chunk back to its producer, which links it again instead of allocating (lock-free:
  // only the consumer pushes, and the producer takes the whole list at once, so no node is ever popped alone).
  void recycle(SpanChunk* chunk) noexcept {
    LENS_DCHECK(chunk->home == this);
    chunk->next_spare = returned_.load(std::memory_order_relaxed);
    while (!returned_.compare_exchange_weak(chunk->next_spare, chunk, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
  }
  // Spare chunks a producer keeps for reuse; more are freed. They stay counted in the budget while kept.
  static constexpr int kMaxSpares = 2;

  std::uint64_t size() const noexcept {
    return pushed_.load(std::memory_order_acquire) - popped_.load(std::memory_order_acquire);
  }

 private:
  bool link_new_chunk(std::uint32_t record_size) noexcept;
  // Producer: a spare chunk that holds `record_size`, or a new one of `capacity`; null when neither can be had.
  SpanChunk* reuse_or_make(std::uint32_t capacity, std::uint32_t record_size) noexcept;

  const std::uint64_t wake_every_;
  QueueBudget& budget_;
  // Producer.
  SpanChunk* tail_;
  std::uint32_t tail_capacity_;
  std::uint32_t write_at_ = 0;      // bytes of records in tail_
  std::uint32_t tail_records_ = 0;  // records in tail_
  std::uint32_t last_capacity_ = SpanChunk::kSmallest;
  std::uint64_t cached_popped_ = 0;
  std::uint64_t next_check_;     // the pushed count at which a full batch may first be waiting
  SpanChunk* spares_ = nullptr;  // at most kMaxSpares, linked by next_spare
  // Consumer -> producer: exported chunks (recycle), taken all at once by the producer.
  alignas(64) std::atomic<SpanChunk*> returned_{nullptr};
  alignas(64) std::atomic<std::uint64_t> pushed_{0};
  // Consumer.
  alignas(64) SpanChunk* head_;
  std::uint32_t read_index_ = 0;    // records read in head_
  std::uint32_t seen_written_ = 0;  // head_->written when last read: reloaded only once caught up with it
  std::atomic<std::uint64_t> popped_{0};
};

template <typename OnRecord, typename OnRetired>
std::size_t SpanQueue::pop(std::size_t max, OnRecord&& on_record, OnRetired&& on_retired) {
  std::size_t n = 0;
  while (n < max) {
    if (read_index_ < seen_written_) {
      std::uint32_t offset;
      std::memcpy(&offset, head_->index_entry(read_index_), 4);
      LENS_DCHECK(offset + kScopeRecordBytes <= head_->capacity);  // only what was published
      on_record(head_->data() + offset);
      ++read_index_;
      ++n;
      continue;
    }
    // Caught up with what was seen: look again, then at whether the producer has moved on to a new chunk.
    // `next` is set after the chunk's last record was published, so `written` is read once more after it.
    seen_written_ = head_->written.load(std::memory_order_acquire);
    if (read_index_ < seen_written_) continue;
    SpanChunk* next = head_->next.load(std::memory_order_acquire);
    if (next == nullptr) break;
    seen_written_ = head_->written.load(std::memory_order_acquire);
    if (read_index_ < seen_written_) continue;
    on_retired(head_);
    head_ = next;
    read_index_ = seen_written_ = 0;
  }
  popped_.store(popped_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  return n;
}

}  // namespace lens::internal
