#include "trace/thread_state.h"

#include <sys/random.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <thread>

namespace lens::internal {

SpanQueue::SpanQueue(std::size_t max_spans, std::size_t bytes)
    : capacity_(std::bit_ceil(bytes < 4096 ? std::size_t{4096} : bytes)), max_spans_(max_spans) {
  buffer_.reset(new std::uint8_t[capacity_]);
  // Touched now, on the thread's first span, rather than page by page in the middle of training steps.
  std::memset(buffer_.get(), 0, capacity_);
}

bool SpanQueue::push(const RecordHeader& header, const std::uint8_t* arena) noexcept {
  std::uint64_t head = head_.load(std::memory_order_relaxed);
  std::uint64_t pushed = pushed_.load(std::memory_order_relaxed);
  if (pushed - cached_popped_ >= max_spans_) {
    cached_popped_ = popped_.load(std::memory_order_acquire);
    if (pushed - cached_popped_ >= max_spans_) return false;
  }
  const std::uint64_t size = header.size;
  std::uint64_t offset = head & (capacity_ - 1);
  std::uint64_t padding = offset + size > capacity_ ? capacity_ - offset : 0;  // a record never wraps
  if (head + padding + size - cached_tail_ > capacity_) {
    cached_tail_ = tail_.load(std::memory_order_acquire);
    if (head + padding + size - cached_tail_ > capacity_) return false;
  }
  if (padding != 0) {
    std::memset(buffer_.get() + offset, 0, 4);  // size 0 marks the padding
    head += padding;
    offset = 0;
  }
  std::memcpy(buffer_.get() + offset, &header, sizeof header);
  std::memcpy(buffer_.get() + offset + sizeof header, arena, header.arena_used);
  head_.store(head + size, std::memory_order_release);
  pushed_.store(pushed + 1, std::memory_order_release);
  return true;
}

namespace {
std::uint64_t splitmix(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

IdGenerator::IdGenerator() noexcept {
  std::uint64_t seed[4] = {};
  if (getrandom(seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    // No entropy source: fall back to time, address and thread id, still independent of user seeding.
    std::uint64_t x = static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count()) ^
                      reinterpret_cast<std::uintptr_t>(this) ^
                      std::hash<std::thread::id>{}(std::this_thread::get_id());
    for (auto& word : seed) word = splitmix(x);
  }
  for (int i = 0; i < 4; ++i) s_[i] = seed[i] ? seed[i] : 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i);
}

std::uint64_t IdGenerator::next() noexcept {
  const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

TraceId IdGenerator::trace_id() noexcept {
  TraceId id;
  std::uint64_t hi, lo;
  do {
    hi = next();
    lo = next();
  } while (hi == 0 && lo == 0);
  std::memcpy(id.bytes.data(), &hi, 8);
  std::memcpy(id.bytes.data() + 8, &lo, 8);
  return id;
}

SpanId IdGenerator::span_id() noexcept {
  SpanId id;
  std::uint64_t v;
  do v = next();
  while (v == 0);
  std::memcpy(id.bytes.data(), &v, 8);
  return id;
}

ThreadState::ThreadState(Pipeline* owner, std::size_t max_spans, std::size_t queue_bytes)
    : pipeline(owner), slots(new OpenSpan[kMaxOpenSpans]), queue(max_spans, queue_bytes) {
  for (int i = 0; i < kMaxOpenSpans; ++i) {
    slots[i].owner = this;
    slots[i].owner_slot_index = static_cast<std::uint8_t>(i);
  }
}

}  // namespace lens::internal
