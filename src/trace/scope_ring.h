// The scope ring: how a `LENS_SPAN` with a literal name and no attributes is recorded (issue 33's kept-span bound).
// Instead of a slot whose header is built at the start and copied into the queue at the end, the training thread
// appends a begin event when the scope opens and an end event when it closes, as Tracy's zones do, and the export
// thread pairs them by nesting into the records the exporters read. The span's identity is made when it starts (its
// children and current_context() need it), so a begin carries its span id, and a begin whose parent is not the
// innermost open scope of the ring is preceded by a context event with the trace and the parent.
//
//   producer (the thread's own)                 consumer (the export thread, or a hang snapshot, under `mutex`)
//   ring.room_for_begin() -> put_*(), publish()  ring.consume(room, emit)  -> RecordHeaders, paired by nesting
//
// Events are four 8-byte words, so none straddles the ring's end. Room for the end of every scope that may be open
// (one a context entry, ThreadState::kMaxContextDepth) is kept back from begins, so an end never finds the ring full:
// a begin that finds it full is dropped and counted, and its scope records nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/dcheck.h"
#include "lens/context.h"
#include "trace/record.h"

namespace lens::internal {

class ScopeRing {
 public:
  static constexpr std::uint32_t kWords = 1u << 14;  // 128 KiB: about 2,000 spans between two drains
  static constexpr std::uint64_t kEventWords = 4;
  static constexpr int kMaxOpenScopes = 128;  // ThreadState::kMaxContextDepth: every open scope has a context entry
  // Kept back from begins: the ends of every scope that may be open, and one more begin with its context event.
  static constexpr std::uint64_t kReservedWords = kEventWords * (kMaxOpenScopes + 2);

  enum Tag : std::uint8_t { kContext = 1, kBegin = 2, kEnd = 3 };
  // A begin's flag: its parent is the innermost open scope of this ring (else a context event precedes it).
  static constexpr std::uint8_t kUnderRingScope = 1;
  // An end's flags: cut at shutdown (CONTRACT §6), or recorded in a slot since (a Span method, an exception): the
  // slot's record is the span's, and the pair only keeps the nesting.
  static constexpr std::uint8_t kTruncated = 1;
  static constexpr std::uint8_t kPromoted = 2;

  ScopeRing() : words_(new std::uint64_t[kWords]) {}

  // ---- producer ---------------------------------------------------------------------------------------------
  enum class Room { kYes, kPastHalf, kFull };
  // Whether a begin (with its context event) fits; kPastHalf: it does, and the export thread should come now.
  LENS_ALWAYS_INLINE Room room_for_begin() noexcept {
    if (__builtin_expect(write_ + 2 * kEventWords <= check_at_, 1)) return Room::kYes;
    return recheck_room();
  }
  LENS_ALWAYS_INLINE void put(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
    std::uint64_t* at = words_.get() + (write_ & (kWords - 1));
    at[0] = a;
    at[1] = b;
    at[2] = c;
    at[3] = d;
    write_ += kEventWords;
  }
  static std::uint64_t begin_word(std::uint8_t flags, std::uint16_t group, std::uint32_t name_length) noexcept {
    return kBegin | std::uint64_t{flags} << 8 | std::uint64_t{group} << 16 | std::uint64_t{name_length} << 32;
  }
  void put_context(const SpanContext& trace_and_flags, const SpanId* parent, bool parent_remote) noexcept {
    std::uint64_t hi, lo, parent_id = 0;
    std::memcpy(&hi, trace_and_flags.trace_id.bytes.data(), 8);
    std::memcpy(&lo, trace_and_flags.trace_id.bytes.data() + 8, 8);
    if (parent != nullptr) std::memcpy(&parent_id, parent->bytes.data(), 8);
    const std::uint64_t bits = RecordHeader::kHasParent * (parent != nullptr) |
                               RecordHeader::kParentRemote * (parent != nullptr && parent_remote);
    put(kContext | std::uint64_t{trace_and_flags.trace_flags} << 8 | bits << 16, hi, lo, parent_id);
  }
  void put_end(std::uint8_t flags, std::uint64_t tick, const SpanId& span_id) noexcept {
    std::uint64_t id;
    std::memcpy(&id, span_id.bytes.data(), 8);
    put(kEnd | std::uint64_t{flags} << 8, tick, id, 0);
  }
  // Makes what was put visible to the consumer (and to a hang snapshot).
  LENS_ALWAYS_INLINE void publish() noexcept { published_.store(write_, std::memory_order_release); }
  // publish(), and true once every batch's worth of spans (the export thread is then rung).
  LENS_ALWAYS_INLINE bool publish_and_check_batch() noexcept {
    publish();
    if (__builtin_expect(write_ < wake_at_, 1)) return false;
    wake_at_ = write_ + batch_words_;
    return true;
  }
  void set_batch_spans(std::uint64_t spans) noexcept { batch_words_ = wake_at_ = 2 * kEventWords * spans; }

  // ---- counts (any thread) ----------------------------------------------------------------------------------
  // Spans ended into the ring (neither promoted nor dropped), and of those the ones the consumer has paired.
  std::atomic<std::uint64_t> ended{0};
  std::atomic<std::uint64_t> paired{0};
  std::uint64_t pending() const noexcept {
    return ended.load(std::memory_order_relaxed) - paired.load(std::memory_order_relaxed);
  }
  bool all_consumed() const noexcept {
    return consumed_.load(std::memory_order_acquire) == published_.load(std::memory_order_acquire);
  }

  // ---- consumer (hold `mutex`) ------------------------------------------------------------------------------
  std::mutex mutex;
  // Pairs published events into records, calling emit(const RecordHeader&) for at most `room` ended spans (a
  // promoted span's pair emits nothing); returns how many were emitted. Reads no further than what was published
  // when it was called, so a producer that never pauses cannot keep it going.
  template <typename Emit>
  std::size_t consume(std::size_t room, Emit&& emit) noexcept;
  // The scopes open now as the consumer would pair them (a hang snapshot): every begin not yet ended, outermost
  // first, with end_tick 0.
  std::vector<RecordHeader> open_scopes() const;

 private:
  Room recheck_room() noexcept;
  struct Pairing {  // the consumer's state between two calls
    RecordHeader open[kMaxOpenScopes];
    int depth = 0;
    RecordHeader context;  // the last context event's trace, flags and parent
    // Applies one event. A kEnd that is not a promoted span's returns true (it is counted as paired), with the record
    // it completes in *record (null only for an end with no begin, which a correct producer never writes).
    bool apply(const std::uint64_t* event, const RecordHeader** record) noexcept;
  };

  std::unique_ptr<std::uint64_t[]> words_;
  // Producer-only.
  std::uint64_t write_ = 0;
  std::uint64_t check_at_ = 0;  // where room_for_begin() next looks at the consumer's position
  std::uint64_t wake_at_ = 0;
  std::uint64_t batch_words_ = 0;
  alignas(64) std::atomic<std::uint64_t> published_{0};
  alignas(64) std::atomic<std::uint64_t> consumed_{0};
  Pairing pairing_;  // under `mutex`
};

template <typename Emit>
std::size_t ScopeRing::consume(std::size_t room, Emit&& emit) noexcept {
  const std::uint64_t end = published_.load(std::memory_order_acquire);
  std::uint64_t at = consumed_.load(std::memory_order_relaxed);
  std::size_t emitted = 0, ends = 0;
  while (at < end && emitted < room) {
    const RecordHeader* record = nullptr;
    if (pairing_.apply(words_.get() + (at & (kWords - 1)), &record)) {
      ++ends;
      if (record != nullptr) {
        emit(*record);
        ++emitted;
      }
    }
    at += kEventWords;
  }
  consumed_.store(at, std::memory_order_release);
  paired.store(paired.load(std::memory_order_relaxed) + ends, std::memory_order_relaxed);
  return emitted;
}

}  // namespace lens::internal
