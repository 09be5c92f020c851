// The queue of ended spans of one thread: a single-producer single-consumer chain of chunks, so its memory is
// what is queued (plus one chunk), bounded per process by a QueueBudget shared by every thread's queue. The bound
// is in bytes, not spans: a burst of small spans fits where OTEL_BSP_MAX_QUEUE_SIZE spans of the largest would.
//
// The producer (the training thread) copies each ended span's record into its current chunk and publishes it
// with one release store; when the chunk is full it links a new one, sized to how far the queue is backed up
// (4 KiB while the export thread keeps up, doubling to 64 KiB while it does not). The consumer (the export
// thread) reads records in place: a batch holds pointers into the chunks, and a chunk it has read to the end is
// handed back (`retired`) to be freed once that batch is exported, so nothing is copied on the way out.
//
// The wake-up: push() says when a full batch is waiting, computed from the consumer's true position, not a
// cached guess, and at most once per batch: a span costs one compare against `next_check_`.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dcheck.h"
#include "trace/record.h"

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

// A run of records. `written` is the producer's published end; `next` is set only once the chunk is full, after
// its last record was published.
struct alignas(16) SpanChunk {
  static constexpr std::uint32_t kSmallest = 4 << 10;
  static constexpr std::uint32_t kLargest = 64 << 10;
  static_assert(kSmallest >= sizeof(RecordHeader) + kArenaBytes + 8, "the largest record fits the smallest chunk");

  // The consumer's position is kept in the queue, not here: the line with `written` is read by the consumer and
  // written by the producer, and nothing else on it changes while the chunk is in use.
  std::atomic<SpanChunk*> next{nullptr};
  std::atomic<std::uint32_t> written{0};
  std::uint32_t capacity = 0;     // bytes of records after this header
  QueueBudget* budget = nullptr;  // the budget it was taken from; null for a thread's first chunk

  std::uint8_t* data() noexcept { return reinterpret_cast<std::uint8_t*>(this + 1); }
  // Null when there is no memory or the budget is spent.
  static SpanChunk* make(std::uint32_t capacity, QueueBudget* budget) noexcept;
  static void free(SpanChunk* chunk) noexcept;
};

class SpanQueue {
 public:
  enum class Push : std::uint8_t { kQueued, kQueuedWakeExporter, kDropped };

  // `wake_every` is the batch size. Throws std::bad_alloc when the first chunk cannot be had.
  SpanQueue(std::uint64_t wake_every, QueueBudget& budget);
  SpanQueue(const SpanQueue&) = delete;
  ~SpanQueue();  // frees every chunk not retired

  // Producer: copies one record (header + arena) in.
  LENS_ALWAYS_INLINE Push push(const RecordHeader& header, const std::uint8_t* arena) noexcept {
    const std::uint64_t pushed = pushed_.load(std::memory_order_relaxed);
    const std::uint32_t size = header.size;
    bool budget_past_half = false;
    LENS_DCHECK(size % 8 == 0 && size >= sizeof header + header.arena_used);  // header and arena, 8-aligned
    if (__builtin_expect(write_at_ + size > tail_capacity_, 0)) {
      if (!link_new_chunk(size, pushed)) return Push::kDropped;
      budget_past_half = budget_.past_half();
    }
    LENS_DCHECK(write_at_ + size <= tail_capacity_);  // a record never crosses its chunk's end
    std::uint8_t* at = tail_->data() + write_at_;
    std::memcpy(at, &header, sizeof header);
    std::memcpy(at + sizeof header, arena, header.arena_used);
    write_at_ += size;
    tail_->written.store(write_at_, std::memory_order_release);
    pushed_.store(pushed + 1, std::memory_order_release);
    if (__builtin_expect(pushed + 1 >= next_check_, 0) && batch_waiting(pushed + 1)) return Push::kQueuedWakeExporter;
    return budget_past_half ? Push::kQueuedWakeExporter : Push::kQueued;
  }

  // Consumer: calls on_record(record) for up to `max` records, in order, and on_retired(chunk) for each chunk
  // read to its end (free it with SpanChunk::free once no batch points into it). Returns the records read.
  template <typename OnRecord, typename OnRetired>
  std::size_t pop(std::size_t max, OnRecord&& on_record, OnRetired&& on_retired);

  // Consumer, once the producer has gone for good: hands every chunk still held to on_retired.
  template <typename OnRetired>
  void retire_all(OnRetired&& on_retired) {
    while (head_ != nullptr) {
      SpanChunk* next = head_->next.load(std::memory_order_acquire);
      on_retired(head_);
      head_ = next;
    }
  }

  std::uint64_t size() const noexcept {
    return pushed_.load(std::memory_order_acquire) - popped_.load(std::memory_order_acquire);
  }

 private:
  bool link_new_chunk(std::uint32_t record_size, std::uint64_t pushed) noexcept;
  bool batch_waiting(std::uint64_t pushed) noexcept;

  const std::uint64_t wake_every_;
  QueueBudget& budget_;
  // Producer.
  SpanChunk* tail_;
  std::uint32_t tail_capacity_;
  std::uint32_t write_at_ = 0;
  std::uint32_t last_capacity_ = SpanChunk::kSmallest;
  std::uint64_t cached_popped_ = 0;
  std::uint64_t next_check_;  // the pushed count at which a full batch may first be waiting
  alignas(64) std::atomic<std::uint64_t> pushed_{0};
  // Consumer.
  alignas(64) SpanChunk* head_;
  std::uint32_t read_at_ = 0;       // in head_
  std::uint32_t seen_written_ = 0;  // head_->written when last read: reloaded only once caught up with it
  std::atomic<std::uint64_t> popped_{0};
};

template <typename OnRecord, typename OnRetired>
std::size_t SpanQueue::pop(std::size_t max, OnRecord&& on_record, OnRetired&& on_retired) {
  std::size_t n = 0;
  while (n < max) {
    if (read_at_ < seen_written_) {
      const std::uint8_t* record = head_->data() + read_at_;
      std::uint32_t size;
      std::memcpy(&size, record, 4);
      LENS_DCHECK(size >= sizeof(RecordHeader) && read_at_ + size <= seen_written_);  // only what was published
      on_record(record);
      read_at_ += size;
      ++n;
      continue;
    }
    // Caught up with what was seen: look again, then at whether the producer has moved on to a new chunk.
    // `next` is set after the chunk's last record was published, so `written` is read once more after it.
    seen_written_ = head_->written.load(std::memory_order_acquire);
    if (read_at_ < seen_written_) continue;
    SpanChunk* next = head_->next.load(std::memory_order_acquire);
    if (next == nullptr) break;
    seen_written_ = head_->written.load(std::memory_order_acquire);
    if (read_at_ < seen_written_) continue;
    on_retired(head_);
    head_ = next;
    read_at_ = seen_written_ = 0;
  }
  popped_.store(popped_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  return n;
}

}  // namespace lens::internal
