#include "trace/span_queue.h"

#include <algorithm>
#include <new>

namespace lens::internal {

bool QueueBudget::take(std::size_t bytes) noexcept {
  std::size_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > limit_) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

SpanChunk* SpanChunk::make(std::uint32_t capacity, QueueBudget* budget) noexcept {
  const std::size_t bytes = sizeof(SpanChunk) + capacity;
  if (budget != nullptr && !budget->take(bytes)) return nullptr;
  void* memory = ::operator new (bytes, std::align_val_t{alignof(SpanChunk)}, std::nothrow);
  if (memory == nullptr) {
    if (budget != nullptr) budget->give(bytes);
    return nullptr;
  }
  auto* chunk = new (memory) SpanChunk;
  chunk->capacity = capacity;
  chunk->budget = budget;
  return chunk;
}

void SpanChunk::free(SpanChunk* chunk) noexcept {
  if (chunk->budget != nullptr) chunk->budget->give(sizeof(SpanChunk) + chunk->capacity);
  chunk->~SpanChunk();
  ::operator delete (chunk, std::align_val_t{alignof(SpanChunk)});
}

SpanQueue::SpanQueue(std::uint64_t wake_every, QueueBudget& budget)
    : wake_every_(std::max<std::uint64_t>(wake_every, 1)),
      budget_(budget),
      tail_(SpanChunk::make(SpanChunk::kSmallest, nullptr)),
      tail_capacity_(SpanChunk::kSmallest),
      next_check_(wake_every_),
      head_(tail_) {
  if (tail_ == nullptr) throw std::bad_alloc();
  tail_->home = this;
}

SpanQueue::~SpanQueue() {
  for (SpanChunk* c = head_; c != nullptr;) {
    SpanChunk* next = c->next.load(std::memory_order_acquire);
    SpanChunk::free(c);
    c = next;
  }
  for (SpanChunk* list : {spares_, returned_.load(std::memory_order_acquire)}) {
    for (SpanChunk* c = list; c != nullptr;) {
      SpanChunk* next = c->next_spare;
      SpanChunk::free(c);
      c = next;
    }
  }
}

SpanChunk* SpanQueue::reuse_or_make(std::uint32_t capacity, std::uint32_t record_size) noexcept {
  // Fold in what the consumer gave back; keep kMaxSpares, free the rest (here, on the thread that made them).
  SpanChunk* returned = returned_.exchange(nullptr, std::memory_order_acquire);
  int kept = 0;
  for (SpanChunk* c = spares_; c != nullptr; c = c->next_spare) ++kept;
  while (returned != nullptr) {
    SpanChunk* next = returned->next_spare;
    if (kept < kMaxSpares) {
      returned->next_spare = spares_;
      spares_ = returned;
      ++kept;
    } else {
      SpanChunk::free(returned);
    }
    returned = next;
  }
  for (SpanChunk** link = &spares_; *link != nullptr; link = &(*link)->next_spare) {
    SpanChunk* c = *link;
    if (c->capacity < record_size + 4) continue;
    *link = c->next_spare;
    c->next_spare = nullptr;
    c->next.store(nullptr, std::memory_order_relaxed);  // published by the release store that links it
    c->written.store(0, std::memory_order_relaxed);
    return c;
  }
  SpanChunk* c = SpanChunk::make(capacity, &budget_);
  if (c != nullptr) c->home = this;
  return c;
}

// Chunks grow while the queue backs up (fewer links, fewer budget touches) and start small again once the
// export thread keeps up, so an idle thread holds one small chunk.
bool SpanQueue::link_new_chunk(std::uint32_t record_size) noexcept {
  const std::uint64_t pushed = pushed_.load(std::memory_order_relaxed);
  cached_popped_ = popped_.load(std::memory_order_acquire);
  const bool backing_up = pushed - cached_popped_ >= wake_every_ / 2;
  std::uint32_t capacity = backing_up ? std::min(last_capacity_ * 2, SpanChunk::kLargest) : SpanChunk::kSmallest;
  capacity = std::max<std::uint32_t>(capacity, record_size + 4);
  SpanChunk* chunk = reuse_or_make(capacity, record_size);
  if (chunk == nullptr) return false;
  capacity = chunk->capacity;
  last_capacity_ = capacity;
  tail_->next.store(chunk, std::memory_order_release);  // after the last record of tail_ was published
  tail_ = chunk;
  tail_capacity_ = capacity;
  write_at_ = 0;
  tail_records_ = 0;
  return true;
}

// A full batch can first be waiting when pushed - popped reaches wake_every_: checked against the consumer's
// true position, so a wake-up is never missed whatever the consumer did in between, and at most once per batch.
bool SpanQueue::batch_waiting() noexcept {
  const std::uint64_t pushed = pushed_.load(std::memory_order_relaxed);
  cached_popped_ = popped_.load(std::memory_order_acquire);
  if (pushed - cached_popped_ >= wake_every_) {
    next_check_ = pushed + wake_every_;
    return true;
  }
  next_check_ = cached_popped_ + wake_every_;
  return false;
}

}  // namespace lens::internal
