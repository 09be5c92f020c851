// Per-thread recording state: the open-span slots, the stack of current contexts, the ids, the queue of
// ended spans and the counters. Made at a thread's first span, freed after the thread ends. Only its thread
// writes it (except the cross-thread slot release and the consumer's side of the queue), so the span path needs
// no lock and no read-modify-write atomic.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>

#include "lens/context.h"
#include "lens/span.h"
#include "trace/record.h"
#include "trace/scope_record.h"
#include "trace/span_queue.h"

namespace lens::internal {

class SpanDrain;

// One open span: its header and arena, built in place until the span ends.
struct ThreadState;
struct DevicePair;
struct OpenSpan {
  RecordHeader header;
  ThreadState* owner = nullptr;
  // A span of a device-timed group (device/device_timing.h): its CUDA events (null when skipped) and whether it pushed
  // an NVTX range; all reset when it ends.
  bool device_timed = false;
  bool nvtx_pushed = false;
  DevicePair* device = nullptr;
  // Odd while the slot holds an open span, even while it is free: bumped when a span starts here (last, once the
  // header is written) and when it ends or is truncated. A Span whose handle holds another value no longer owns the
  // slot; a hang snapshot reads the slot as a seqlock (SpanDrain::open_spans).
  std::atomic<std::uint32_t> generation{0};
  std::uint8_t owner_slot_index = 0;
  alignas(8) std::uint8_t arena[kArenaBytes];
};

// Counters of one thread, summed by SpanDrain::stats(). Written by their thread only (load + store, no RMW).
struct ThreadCounters {
  std::atomic<std::uint64_t> produced{0};  // sampled-in spans: ended, truncated, or refused a slot
  std::atomic<std::uint64_t> dropped_queue_full{0};
  std::atomic<std::uint64_t> dropped_no_slot{0};  // more than kMaxOpenSpans open on the thread
  std::atomic<std::uint64_t> dropped_after_shutdown{0};
  std::atomic<std::uint64_t> sampled_out{0};  // not a drop: the sampler decided

  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t by = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  // Adds `other`'s counts (the caller is this set's only writer, or holds the lock its writers hold).
  void add(const ThreadCounters& other) noexcept {
    for (auto [sum, part] : {std::pair{&produced, &other.produced},
                             {&dropped_queue_full, &other.dropped_queue_full},
                             {&dropped_no_slot, &other.dropped_no_slot},
                             {&dropped_after_shutdown, &other.dropped_after_shutdown},
                             {&sampled_out, &other.sampled_out}})
      bump(*sum, part->load(std::memory_order_relaxed));
  }
};

// What a context entry is of, beside its context: a light scope's state (trace/scope_record.h) or nothing more.
enum class LightScopeState : std::uint8_t {
  kNone = 0,      // not a light scope
  kOpen = 1,      // its scope record will be queued when it ends
  kPromoted = 2,  // recorded in a slot since (a Span method, or an exception leaving its scope)
  kEnded = 3,     // ended early (Span::end), or cut at shutdown: its scope's end does nothing
};

// An entry, and the LightScope beside it, fill one cache line each: a span touches one line of each, and the compiler
// finds the i-th with one shift (an odd size needs a multiply, three times a span).
struct alignas(64) ContextEntry {
  SpanContext context;
  const SpanHandle* span = nullptr;  // the live span it is the context of, if any (push_context)
  bool attached = false;             // pushed by another API's context.attach (push_context)
  LightScopeState light = LightScopeState::kNone;
};

// Sets `e` to a context that is not a light scope's, field by field: an aligned ContextEntry built on the stack would
// make its function realign its frame.
inline void set_entry(ContextEntry& e, const SpanContext& context, const SpanHandle* span, bool attached) noexcept {
  e.context = context;
  e.span = span;
  e.attached = attached;
  e.light = LightScopeState::kNone;
}

// Beside the context entry of a light scope: what its record needs besides its context, and its slot once promoted.
// A hang snapshot on another thread reads it (and the entry's context) as a seqlock: `generation` is odd while
// the scope is open and not promoted, bumped (release) after the fields are written and when it ends.
struct alignas(64) LightScope {
  std::atomic<std::uint32_t> generation{0};
  std::uint64_t first_word;  // the record's word 0 (scope_record_first_word): attribute count, name length, bits, ...
  const char* name;
  std::uint64_t start_tick;
  SpanId parent_span_id;  // zero: none
  OpenSpan* slot;         // once promoted
  std::uint32_t slot_generation;

  std::uint32_t attribute_count() const noexcept { return scope_record_attribute_count(first_word); }
  std::uint32_t name_length() const noexcept { return scope_record_name_length(first_word); }
  std::uint8_t bits() const noexcept { return scope_record_bits(first_word); }
  std::uint16_t group() const noexcept { return scope_record_group(first_word); }
};

struct ThreadState {
  static constexpr int kMaxOpenSpans = 64;
  static constexpr int kMaxContextDepth = 128;

  ThreadState(SpanDrain* owner, std::uint64_t batch_size, QueueBudget& budget);

  SpanDrain* drain;
  pid_t tid;                                     // the thread's id (gettid), named in hang snapshots
  std::uint64_t free_slots = ~std::uint64_t{0};  // owner-only bitmap of free slots
  std::atomic<std::uint64_t> remote_free{0};     // slots released by other threads, folded in lazily
  std::unique_ptr<OpenSpan[]> slots;
  ContextEntry contexts[kMaxContextDepth];
  LightScope light_scopes[kMaxContextDepth];  // beside contexts[i] when it is a light scope's
  // Its packed attributes (its LightScope's attribute_count()): apart, so a scope without any touches no more memory
  // and a LightScope stays one cache line.
  PackedAttribute light_attributes[kMaxContextDepth][kMaxScopeAttributes];
  int context_depth = 0;
  SpanIds span_ids;
  // This thread's count of uncaught exceptions, where std::uncaught_exceptions() reads it
  // (uncaught_exceptions_of_this_thread).
  const unsigned int* uncaught_exceptions;
  SpanQueue queue;
  ThreadCounters counters;
  // Set when the thread ends; the export thread frees the state once its queue is drained and no span it
  // started is still open on another thread.
  std::atomic<bool> exited{false};

  bool all_slots_free() const noexcept {
    return (free_slots | remote_free.load(std::memory_order_acquire)) == ~std::uint64_t{0};
  }

  // Whether the calling thread is this state's, in the process that made it (a forked child ends its parent's spans on
  // a thread of its own). For DCHECKs: two system calls.
  bool is_calling_thread() const noexcept { return pid != ::getpid() || tid == ::gettid(); }
  const pid_t pid = ::getpid();  // the process that made it
};

// Where the calling thread's C++ runtime counts its uncaught exceptions (the Itanium C++ ABI's per-thread exception
// globals, which libstdc++ and libc++abi keep): its address is fixed for the thread's life, so a span reads the count
// with one load instead of a call into libstdc++ that finds its thread-local through __tls_get_addr.
const unsigned int* uncaught_exceptions_of_this_thread() noexcept;

// Ends t's open light scopes, innermost first, as truncated: their scope records into t's queue
// (SpanDrain::truncate_open_spans' part for them; on t's thread, or while t is parked).
void truncate_open_light_scopes(ThreadState& t) noexcept;

// The calling thread's state, whatever pipeline it belongs to (null before its first span), and forgetting it
// (a forked child starts afresh). trace/calling_thread.h holds the thread-local.
ThreadState* current_thread_state_if_any() noexcept;
void forget_thread_state() noexcept;

}  // namespace lens::internal
