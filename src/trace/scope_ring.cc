#include "trace/scope_ring.h"

#include <algorithm>

#include "lens/span.h"

namespace lens::internal {

ScopeRing::Room ScopeRing::recheck_room() noexcept {
  const std::uint64_t used = write_ - consumed_.load(std::memory_order_acquire);
  LENS_DCHECK(used <= kWords);  // the producer never passes the consumer
  const std::uint64_t room = kWords - kReservedWords > used ? kWords - kReservedWords - used : 0;
  if (room < 2 * kEventWords) {
    check_at_ = write_;  // every begin looks again until the consumer frees some
    return Room::kFull;
  }
  check_at_ = write_ + std::min<std::uint64_t>(room, kWords / 8);
  return used > kWords / 2 ? Room::kPastHalf : Room::kYes;
}

bool ScopeRing::Pairing::apply(const std::uint64_t* event, const RecordHeader** record) noexcept {
  const std::uint64_t first = event[0];
  const auto flags = static_cast<std::uint8_t>(first >> 8);
  switch (static_cast<Tag>(first & 0xff)) {
    case kContext:
      context.trace_flags = flags;
      context.bits = static_cast<std::uint8_t>(first >> 16);
      std::memcpy(context.trace_id.bytes.data(), &event[1], 8);
      std::memcpy(context.trace_id.bytes.data() + 8, &event[2], 8);
      std::memcpy(context.parent_span_id.bytes.data(), &event[3], 8);
      return false;
    case kBegin: {
      LENS_DCHECK(depth < kMaxOpenScopes);  // every open scope holds a context entry
      if (depth == kMaxOpenScopes) return false;
      RecordHeader& r = open[depth];
      r = RecordHeader{};
      r.size = sizeof(RecordHeader);
      if ((flags & kUnderRingScope) && depth > 0) {
        const RecordHeader& parent = open[depth - 1];
        r.trace_id = parent.trace_id;
        r.parent_span_id = parent.span_id;
        r.trace_flags = parent.trace_flags;
        r.bits = RecordHeader::kHasParent;
      } else {
        LENS_DCHECK(!(flags & kUnderRingScope));  // a scope under a ring scope finds it open here
        r.trace_id = context.trace_id;
        r.parent_span_id = context.parent_span_id;
        r.trace_flags = context.trace_flags;
        r.bits = context.bits;
      }
      const char* name;  // the literal's pointer the producer put, as bytes
      std::memcpy(&name, &event[1], sizeof name);
      r.name = TextRef{name, 0, static_cast<std::uint32_t>(first >> 32)};
      r.group = static_cast<std::uint16_t>(first >> 16);
      r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
      r.start_tick = event[2];
      std::memcpy(r.span_id.bytes.data(), &event[3], 8);
      ++depth;
      return false;
    }
    case kEnd: {
      const bool promoted = (flags & kPromoted) != 0;
      LENS_DCHECK(depth > 0);  // every end follows its begin
      if (depth == 0) return !promoted;
      RecordHeader& r = open[--depth];
      LENS_DCHECK(std::memcmp(r.span_id.bytes.data(), &event[2], 8) == 0);  // ends pair with begins by nesting
      if (promoted) return false;
      r.end_tick = event[1];
      if (flags & kTruncated) r.bits |= RecordHeader::kTruncated;
      *record = &r;
      return true;
    }
  }
  LENS_DCHECK(false);  // the producer writes no other tag
  return false;
}

std::vector<RecordHeader> ScopeRing::open_scopes() const {
  // A copy of the pairing, run over what is published but not yet consumed: what is left open is open now.
  auto pairing = std::make_unique<Pairing>(pairing_);
  const std::uint64_t end = published_.load(std::memory_order_acquire);
  for (std::uint64_t at = consumed_.load(std::memory_order_relaxed); at < end; at += kEventWords) {
    const RecordHeader* ignored = nullptr;
    pairing->apply(words_.get() + (at & (kWords - 1)), &ignored);
  }
  return {pairing->open, pairing->open + pairing->depth};
}

}  // namespace lens::internal
