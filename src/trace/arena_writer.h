// The arena writer: how a slot span's name, attributes, events, links and status message are appended to its
// arena (the entry layouts in trace/record.h), each within the drain's limits, what does not fit counted as dropped.
// The thread that owns the span writes; commit() publishes, so a hang snapshot or a truncation on another thread
// reads only whole entries.
//
//   append_attributes(slot, drain.limits, attributes);  // those beyond the limits counted in dropped_attributes
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "common/dcheck.h"
#include "lens/attributes.h"
#include "lens/config.h"
#include "lens/span.h"
#include "trace/record.h"
#include "trace/thread_state.h"

namespace lens::internal {

// Writes entries at the end of a span's arena through a local cursor (so the compiler keeps it in a register
// despite the byte stores), published by commit().
class ArenaWriter {
 public:
  explicit ArenaWriter(OpenSpan& s) noexcept : s_(s), begin_(s.arena), at_(s.arena + s.header.arena_used) {}
  bool fits(std::size_t bytes) const noexcept { return static_cast<std::size_t>(at_ - begin_) + bytes <= kArenaBytes; }
  template <typename T>
  void put(const T& v) noexcept {
    std::memcpy(at_, &v, sizeof v);
    at_ += sizeof v;
  }
  void bytes(const void* p, std::size_t n) noexcept {
    std::memcpy(at_, p, n);
    at_ += n;
  }
  std::uint32_t position() const noexcept { return static_cast<std::uint32_t>(at_ - begin_); }
  std::uint8_t* cursor() const noexcept { return at_; }
  const std::uint8_t* limit() const noexcept { return begin_ + kArenaBytes; }
  void set_cursor(std::uint8_t* at) noexcept { at_ = at; }
  // Publishes what was written: a truncation that interrupts a write, or a hang snapshot read on another thread,
  // sees only complete entries (a release store: a plain store on x86 and ARM's stlr).
  void commit() noexcept {
    LENS_DCHECK(position() <= kArenaBytes);  // every entry was checked with fits() before it was written
    __atomic_store_n(&s_.header.arena_used, position(), __ATOMIC_RELEASE);
  }

 private:
  OpenSpan& s_;
  std::uint8_t* const begin_;
  std::uint8_t* at_;
};

// Appends `attributes`, those beyond the span's attribute count limit or the arena's room counted as dropped.
void append_attributes(OpenSpan& s, const Limits& limits, std::span<const Attribute> attributes) noexcept;
// Appends an event at `tick`, dropped (and counted) past the event limit or when its name has no room.
void append_event(OpenSpan& s, const Limits& limits, SpanName name, std::uint64_t tick,
                  std::span<const Attribute> attributes) noexcept;
// Appends a link, dropped (and counted) past the link limit or when it has no room.
void append_link(OpenSpan& s, const Limits& limits, const SpanContext& link,
                 std::span<const Attribute> attributes) noexcept;
// OpenTelemetry's exception event (exception.type, .message, .escaped), the span marked as having one.
void record_exception_entry(OpenSpan& s, const Limits& limits, std::string_view type, std::string_view message,
                            bool escaped) noexcept;
// Copies `name` into the arena, cut to a quarter of it (a runaway name must not fill it), and points the header at
// the copy; false, the name left as it was, when the arena has no room (only a span renamed late: a new one's is
// empty).
bool set_copied_name(OpenSpan& s, std::string_view name) noexcept;
// Sets (or, when there is no room, leaves unset) the status description.
void set_status_message(OpenSpan& s, std::string_view message) noexcept;

}  // namespace lens::internal
