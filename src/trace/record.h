// The byte format of a span while it is open (in its thread's slot) and after it ended (in the queue and the
// export batch): a fixed header followed by an arena of entries (attributes, events, links, copied strings).
// Written on the training thread with memcpy only; read back by the exporters through SpanView.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/clock.h"
#include "lens/attributes.h"
#include "lens/context.h"
#include "lens/internal/scope_attributes.h"
#include "lens/span.h"

namespace lens::internal {

enum class EntryTag : std::uint8_t { kAttribute = 1, kEvent = 2, kLink = 3, kStatusMessage = 4, kName = 5 };

// A reference to text: a static pointer (literals) or an offset into the arena (copied text).
struct TextRef {
  const char* pointer;  // null: the text is in the arena at `offset`
  std::uint32_t offset;
  std::uint32_t length;
};

struct RecordHeader {
  std::uint32_t size;  // header + arena bytes, rounded up to 8 (the queue's framing); below 64 KiB
  std::uint32_t arena_used;
  TraceId trace_id;
  SpanId span_id;
  SpanId parent_span_id;
  std::uint64_t start_tick;
  std::uint64_t end_tick;
  TextRef name;
  std::uint8_t kind;
  std::uint8_t status_code;
  std::uint8_t trace_flags;
  std::uint8_t bits;  // kHasParent | kParentRemote | kTruncated | kHasException | kPositionOnly | ... | kStepSpan
  std::uint16_t attribute_count;
  std::uint16_t event_count;
  std::uint16_t link_count;
  std::uint16_t group;
  std::uint32_t dropped_attributes;
  std::uint32_t dropped_events;
  std::uint32_t dropped_links;
  std::uint32_t status_message_entry;  // arena offset + 1 of the last kStatusMessage entry; 0 = none
  std::uint16_t scope;                 // its instrumentation scope (trace/instrumentation_scopes.h); 0: lens's own

  static constexpr std::uint8_t kHasParent = 1;
  static constexpr std::uint8_t kParentRemote = 2;
  static constexpr std::uint8_t kTruncated = 4;
  static constexpr std::uint8_t kHasException = 8;
  // Kept only while open, for a hang snapshot (its group is a position group, not enabled): never exported.
  static constexpr std::uint8_t kPositionOnly = 16;
  // start_tick / end_tick hold Unix nanoseconds given by the caller (a back-dated start, an explicit end), not ticks.
  static constexpr std::uint8_t kStartIsUnixNanos = 32;
  static constexpr std::uint8_t kEndIsUnixNanos = 64;
  // A step span of the step layout, under its step trace's root (StepTraces, trace/span_drain.h).
  static constexpr std::uint8_t kStepSpan = 128;
};
static_assert(std::is_trivially_copyable_v<RecordHeader>);

// A span's start and end in Unix nanoseconds: ticks through the batch's time map, or as the caller gave them.
inline std::uint64_t start_unix_nanos(const RecordHeader& h, const TimeMap& time) noexcept {
  return (h.bits & RecordHeader::kStartIsUnixNanos) ? h.start_tick : time.to_unix_nanos(h.start_tick);
}
inline std::uint64_t end_unix_nanos(const RecordHeader& h, const TimeMap& time) noexcept {
  return (h.bits & RecordHeader::kEndIsUnixNanos) ? h.end_tick : time.to_unix_nanos(h.end_tick);
}

inline constexpr std::uint32_t kArenaBytes = 2048;

// The first byte of a scope record (trace/scope_record.h), where a RecordHeader has the low byte of its size (a
// multiple of 8, so never 1): SpanView reads either.
inline constexpr std::uint8_t kScopeRecordMark = 1;

// The arena's entries, each a fixed head (below, the one definition both the arena writer (arena_writer.cc) and the
// readers here use; copied in and out with memcpy, so no alignment is assumed) and a variable part:
//   attribute: AttributeHead, key (8-byte pointer when static, else the bytes), u32 value bytes, value (bool 1
//              byte, int/double 8, string bytes, arrays: the elements; string arrays: u32 count, then u32 length
//              and bytes each)
//   event:     TextHead (name), name (pointer or bytes), EventTail, then that many attribute entries
//   link:      LinkHead, then that many attribute entries
//   status message / name: TextHead, bytes
struct AttributeHead {
  std::uint8_t tag;   // EntryTag::kAttribute
  std::uint8_t type;  // ValueType
  std::uint8_t key_is_static;
  std::uint8_t pad;
  std::uint32_t key_length;
};
static_assert(sizeof(AttributeHead) == 8);

struct TextHead {  // an event's name (is_static may be 1), a status message or a copied span name
  std::uint8_t tag;
  std::uint8_t is_static;
  std::uint8_t pad[2];
  std::uint32_t length;
};
static_assert(sizeof(TextHead) == 8);

struct AttributeCounts {  // before the attribute entries of an event or a link
  std::uint32_t written;
  std::uint32_t dropped;
};
static_assert(sizeof(AttributeCounts) == 8);

struct EventTail {  // after an event's name
  std::uint64_t tick;
  AttributeCounts counts;
};
static_assert(sizeof(EventTail) == 16);

struct LinkHead {
  std::uint8_t tag;  // EntryTag::kLink
  std::uint8_t pad[3];
  std::uint8_t trace_id[16];
  std::uint8_t span_id[8];
  std::uint8_t trace_flags;
  std::uint8_t is_remote;
  std::uint8_t pad2[2];
  AttributeCounts counts;
};
static_assert(sizeof(LinkHead) == 40);

// The common attribute, a static key and an 8-byte number, written in one piece by the span path.
inline constexpr std::size_t kStaticNumberAttributeBytes =
    sizeof(AttributeHead) + sizeof(const char*) + sizeof(std::uint32_t) + 8;

// A decoded attribute, pointing into the record.
struct AttributeView {  // 32 bytes: the exporter keeps a span's attributes in an array of them
  std::string_view key;
  const std::uint8_t* value;  // raw value bytes, decode with the helpers below
  std::uint32_t value_bytes;
  ValueType type;

  bool as_bool() const noexcept { return value[0] != 0; }
  std::int64_t as_int() const noexcept {
    std::int64_t v;
    std::memcpy(&v, value, 8);
    return v;
  }
  double as_double() const noexcept {
    double v;
    std::memcpy(&v, value, 8);
    return v;
  }
  std::string_view as_string() const noexcept { return {reinterpret_cast<const char*>(value), value_bytes}; }
  // Array element count (string arrays: the stored count).
  std::uint32_t array_size() const noexcept;
  bool bool_at(std::uint32_t i) const noexcept { return value[i] != 0; }
  std::int64_t int_at(std::uint32_t i) const noexcept;
  double double_at(std::uint32_t i) const noexcept;
  // String arrays: call with a cursor starting at 0; returns the element and advances the cursor.
  std::string_view next_string(std::uint32_t& cursor) const noexcept;
};

struct EventView {
  std::string_view name;
  std::uint64_t tick;
  std::uint32_t attribute_count;
  std::uint32_t dropped_attributes;
  const std::uint8_t* attributes;  // first attribute entry
};

struct LinkView {
  SpanContext context;
  std::uint32_t attribute_count;
  std::uint32_t dropped_attributes;
  const std::uint8_t* attributes;
};

// Read access to one ended span: a span record, or a scope record (an internal span with no events or links and its
// attributes packed, read into a header here).
class SpanView {
 public:
  inline explicit SpanView(const std::uint8_t* record) noexcept;
  const RecordHeader& header() const noexcept { return header_; }
  std::string_view name() const noexcept { return text(header_.name); }
  inline std::string_view status_message() const noexcept;

  // Visits span attributes (last value wins for a repeated key), events and links, in the order added.
  template <typename F>
  void for_each_attribute(F&& f) const;
  template <typename F>
  void for_each_event(F&& f) const;
  template <typename F>
  void for_each_link(F&& f) const;
  // Visits `count` attribute entries starting at `at` (an event's or a link's).
  template <typename F>
  static void for_each_attribute_at(const std::uint8_t* at, std::uint32_t count, F&& f);

  std::string_view text(const TextRef& ref) const noexcept {
    return ref.pointer ? std::string_view(ref.pointer, ref.length)
                       : std::string_view(reinterpret_cast<const char*>(arena_ + ref.offset), ref.length);
  }

  // Decoding primitives (shared with the tests).
  static inline AttributeView read_attribute(const std::uint8_t* at, const std::uint8_t** next) noexcept;
  // A scope record's attribute (lens/internal/scope_attributes.h) at `at`.
  static inline AttributeView read_packed_attribute(const std::uint8_t* at) noexcept;
  static EventView read_event(const std::uint8_t* at, const std::uint8_t** next) noexcept;
  static LinkView read_link(const std::uint8_t* at, const std::uint8_t** next) noexcept;
  static const std::uint8_t* skip_entry(const std::uint8_t* at) noexcept;

 private:
  bool is_overridden(const std::uint8_t* attribute_entry, std::string_view key) const noexcept;
  void read_scope_record(const std::uint8_t* record) noexcept;
  // Calls f(entry) for each top-level entry with `tag`.
  template <typename F>
  void for_each_entry(EntryTag tag, F&& f) const;

  RecordHeader header_;
  const std::uint8_t* arena_;
  const std::uint8_t* packed_attributes_ = nullptr;  // a scope record's (header_.attribute_count of them)
};

namespace record_detail {

template <typename T>
inline T load(const std::uint8_t* at) noexcept {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Key or name text: a pointer when static, else the bytes inline. Returns the text and where it ends.
inline std::string_view read_text(const std::uint8_t* at, bool is_static, std::uint32_t length,
                                  const std::uint8_t** end) noexcept {
  if (is_static) {
    *end = at + sizeof(const char*);
    return {load<const char*>(at), length};
  }
  *end = at + length;
  return {reinterpret_cast<const char*>(at), length};
}

}  // namespace record_detail

// Inline, as the decoding below: the exporter runs them for every span.
SpanView::SpanView(const std::uint8_t* record) noexcept {
  if (record[0] == kScopeRecordMark) {
    read_scope_record(record);
    return;
  }
  std::memcpy(&header_, record, sizeof header_);
  arena_ = record + sizeof(RecordHeader);
}

std::string_view SpanView::status_message() const noexcept {
  if (header_.status_message_entry == 0) return {};
  const std::uint8_t* at = arena_ + header_.status_message_entry - 1;
  const auto head = record_detail::load<TextHead>(at);
  return {reinterpret_cast<const char*>(at + sizeof head), head.length};
}

AttributeView SpanView::read_attribute(const std::uint8_t* at, const std::uint8_t** next) noexcept {
  AttributeView a;
  const auto head = record_detail::load<AttributeHead>(at);
  a.type = static_cast<ValueType>(head.type);
  const std::uint8_t* after_key;
  a.key = record_detail::read_text(at + sizeof head, head.key_is_static != 0, head.key_length, &after_key);
  a.value_bytes = record_detail::load<std::uint32_t>(after_key);
  a.value = after_key + 4;
  *next = a.value + a.value_bytes;
  return a;
}

AttributeView SpanView::read_packed_attribute(const std::uint8_t* at) noexcept {
  const auto p = record_detail::load<PackedAttribute>(at);
  AttributeView a;
  a.key = packed_key(p);
  a.type = packed_type(p);
  if (a.type == ValueType::kString) {
    const std::string_view s = packed_string(p);
    a.value = reinterpret_cast<const std::uint8_t*>(s.data());
    a.value_bytes = static_cast<std::uint32_t>(s.size());
  } else {
    a.value = at + offsetof(PackedAttribute, value);
    a.value_bytes = a.type == ValueType::kBool ? 1 : 8;
  }
  return a;
}

template <typename F>
void SpanView::for_each_attribute(F&& f) const {
  // A key set twice keeps its last value. The usual span has a few attributes: decode each once into a small
  // array, and compare keys only when two have the same length (a bit per length, modulo 64); only a span with
  // more than kFew entries takes the rescan of the arena per entry.
  constexpr std::size_t kFew = 16;
  union Few {  // left uninitialized: only the first n are written and read
    Few() {}
    AttributeView views[kFew];
  } storage;
  AttributeView* few = storage.views;
  std::size_t n = 0;
  std::uint64_t lengths_seen = 0;
  bool same_length = false;
  auto set_again_among_few = [&](std::size_t i) {
    for (std::size_t j = i + 1; j < n; ++j)
      if (few[j].key == few[i].key) return true;
    return false;
  };
  auto keep = [&](const AttributeView& a) {
    const std::uint64_t length_bit = std::uint64_t{1} << (a.key.size() & 63);
    same_length |= (lengths_seen & length_bit) != 0;
    lengths_seen |= length_bit;
    few[n++] = a;
  };
  static_assert(kMaxScopeAttributes <= kFew);
  if (packed_attributes_ != nullptr)
    for (std::uint32_t i = 0; i < header_.attribute_count; ++i)
      keep(read_packed_attribute(packed_attributes_ + sizeof(PackedAttribute) * i));
  const std::uint8_t* at = arena_;
  const std::uint8_t* end = arena_ + header_.arena_used;
  while (at < end) {
    if (static_cast<EntryTag>(*at) != EntryTag::kAttribute) {
      at = skip_entry(at);
      continue;
    }
    const std::uint8_t* next;
    AttributeView a = read_attribute(at, &next);
    if (n == kFew) {  // many: report those decoded so far, then the rest with the rescan
      for (std::size_t i = 0; i < n; ++i)
        if (!set_again_among_few(i) && !is_overridden(at, few[i].key)) f(few[i]);
      for (n = 0; at < end;) {
        if (static_cast<EntryTag>(*at) == EntryTag::kAttribute) {
          AttributeView b = read_attribute(at, &next);
          if (!is_overridden(next, b.key)) f(b);
          at = next;
        } else {
          at = skip_entry(at);
        }
      }
      return;
    }
    keep(a);
    at = next;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!same_length || !set_again_among_few(i)) f(few[i]);
}

template <typename F>
void SpanView::for_each_event(F&& f) const {
  for_each_entry(EntryTag::kEvent, [&](const std::uint8_t* at) {
    const std::uint8_t* next;
    f(read_event(at, &next));
  });
}

template <typename F>
void SpanView::for_each_link(F&& f) const {
  for_each_entry(EntryTag::kLink, [&](const std::uint8_t* at) {
    const std::uint8_t* next;
    f(read_link(at, &next));
  });
}

template <typename F>
void SpanView::for_each_entry(EntryTag tag, F&& f) const {
  const std::uint8_t* end = arena_ + header_.arena_used;
  for (const std::uint8_t* at = arena_; at < end; at = skip_entry(at))
    if (static_cast<EntryTag>(*at) == tag) f(at);
}

template <typename F>
void SpanView::for_each_attribute_at(const std::uint8_t* at, std::uint32_t count, F&& f) {
  for (std::uint32_t i = 0; i < count; ++i) f(read_attribute(at, &at));
}

}  // namespace lens::internal
