// Per-thread recording state: the open-span slots, the stack of current contexts, the id generator, the queue of
// ended spans and the counters. Only its thread writes it (except the cross-thread slot release and the
// consumer's side of the queue), so the span path needs no lock and no read-modify-write atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "lens/context.h"
#include "trace/record.h"

namespace lens::internal {

class Pipeline;

// One open span: its header and arena, built in place until the span ends.
struct ThreadState;
struct OpenSpan {
  RecordHeader header;
  ThreadState* owner = nullptr;
  // Bumped when the slot is released or truncated: a Span whose handle holds an older value no longer owns it.
  std::atomic<std::uint32_t> generation{1};
  std::uint8_t owner_slot_index = 0;
  alignas(8) std::uint8_t arena[kArenaBytes];
};

// Single-producer single-consumer byte queue of ended-span records, bounded in bytes and in spans.
class SpanQueue {
 public:
  SpanQueue(std::size_t max_spans, std::size_t bytes);
  // Producer: copies one record (header + arena) in; false when it does not fit (the caller counts the drop).
  bool push(const RecordHeader& header, const std::uint8_t* arena) noexcept;
  // Consumer: calls f(record bytes) for up to `max` records; returns how many.
  template <typename F>
  std::size_t pop(std::size_t max, F&& f);
  // Producer only, without touching the consumer's cache line: at least the spans waiting now.
  std::uint64_t pending_estimate() const noexcept {
    return pushed_.load(std::memory_order_relaxed) - cached_popped_;
  }
  std::uint64_t size() const noexcept {
    return pushed_.load(std::memory_order_acquire) - popped_.load(std::memory_order_acquire);
  }

 private:
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::uint64_t capacity_;  // a power of two
  std::uint64_t max_spans_;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // bytes written (producer)
  std::atomic<std::uint64_t> pushed_{0};            // records written (producer)
  std::uint64_t cached_tail_ = 0;                   // producer's view of tail_
  std::uint64_t cached_popped_ = 0;                 // producer's view of popped_
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // bytes consumed (consumer)
  std::atomic<std::uint64_t> popped_{0};            // records consumed (consumer)
};

// Counters of one thread, summed by Pipeline::stats(). Written by their thread only (load + store, no RMW).
struct ThreadCounters {
  std::atomic<std::uint64_t> produced{0};            // sampled-in spans: ended, truncated, or refused a slot
  std::atomic<std::uint64_t> dropped_queue_full{0};
  std::atomic<std::uint64_t> dropped_no_slot{0};     // more than kMaxOpenSpans open on the thread
  std::atomic<std::uint64_t> dropped_after_shutdown{0};
  std::atomic<std::uint64_t> sampled_out{0};         // not a drop: the sampler decided

  static void bump(std::atomic<std::uint64_t>& c) noexcept {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

// xoshiro256**: fast, 256-bit state, seeded from the OS (getrandom) per thread.
class IdGenerator {
 public:
  IdGenerator() noexcept;  // seeds from OS entropy
  std::uint64_t next() noexcept;
  TraceId trace_id() noexcept;  // never all-zero
  SpanId span_id() noexcept;    // never all-zero

 private:
  std::uint64_t s_[4];
};

struct ContextEntry {
  SpanContext context;
};

struct ThreadState {
  static constexpr int kMaxOpenSpans = 64;
  static constexpr int kMaxContextDepth = 128;

  ThreadState(Pipeline* owner, std::size_t max_spans, std::size_t queue_bytes);

  Pipeline* pipeline;
  std::uint64_t free_slots = ~std::uint64_t{0};       // owner-only bitmap of free slots
  std::atomic<std::uint64_t> remote_free{0};          // slots released by other threads, folded in lazily
  std::unique_ptr<OpenSpan[]> slots;
  ContextEntry contexts[kMaxContextDepth];
  int context_depth = 0;
  IdGenerator ids;
  SpanQueue queue;
  ThreadCounters counters;
};

// The calling thread's state, whatever pipeline it belongs to (null before its first span), and forgetting it
// (a forked child starts afresh). recorder.cc owns the thread-local.
ThreadState* current_thread_state_if_any() noexcept;
void forget_thread_state() noexcept;

template <typename F>
std::size_t SpanQueue::pop(std::size_t max, F&& f) {
  std::uint64_t tail = tail_.load(std::memory_order_relaxed);
  std::uint64_t head = head_.load(std::memory_order_acquire);
  std::size_t n = 0;
  std::uint64_t popped = popped_.load(std::memory_order_relaxed);
  while (n < max && tail != head) {
    const std::uint8_t* at = buffer_.get() + (tail & (capacity_ - 1));
    std::uint32_t size;
    std::memcpy(&size, at, 4);
    if (size == 0) {  // padding to the end of the buffer
      tail += capacity_ - (tail & (capacity_ - 1));
      continue;
    }
    f(at);
    tail += size;
    ++n;
    ++popped;
  }
  tail_.store(tail, std::memory_order_release);
  popped_.store(popped, std::memory_order_release);
  return n;
}

}  // namespace lens::internal
