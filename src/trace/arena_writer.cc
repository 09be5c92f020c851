#include "trace/arena_writer.h"

#include <algorithm>
#include <cstdint>

#include "common/clock.h"

namespace lens::internal {

namespace {

std::size_t text_bytes(bool is_static, std::size_t length) noexcept { return is_static ? sizeof(const char*) : length; }

void put_text(ArenaWriter& w, std::string_view text, bool is_static) noexcept {
  if (is_static) {
    w.put(text.data());
  } else {
    w.bytes(text.data(), text.size());
  }
}

// Bytes a value takes, with strings cut to `max_length`.
std::size_t value_bytes(const AttributeValue& v, std::size_t max_length) noexcept {
  switch (v.type()) {
    case ValueType::kBool: return 1;
    case ValueType::kInt:
    case ValueType::kDouble: return 8;
    case ValueType::kString: return std::min(v.as_string().size(), max_length);
    case ValueType::kBoolArray: return v.as_bools().size();
    case ValueType::kIntArray: return 8 * v.as_ints().size();
    case ValueType::kDoubleArray: return 8 * v.as_doubles().size();
    case ValueType::kStringArray: {
      std::size_t n = 4;
      for (std::string_view s : v.as_strings()) n += 4 + std::min(s.size(), max_length);
      return n;
    }
  }
  return 0;
}

struct ArenaCursor {
  std::uint8_t* at;
  void u8(std::uint8_t v) noexcept { *at++ = v; }
  void u32(std::uint32_t v) noexcept {
    std::memcpy(at, &v, 4);
    at += 4;
  }
  void bytes(const void* p, std::size_t n) noexcept {
    std::memcpy(at, p, n);
    at += n;
  }
};

// Array values (the rare case).
void put_array(ArenaCursor& c, const AttributeValue& v, std::size_t max_length) noexcept {
  switch (v.type()) {
    case ValueType::kBoolArray:
      for (bool b : v.as_bools()) c.u8(b ? 1 : 0);
      break;
    case ValueType::kIntArray: c.bytes(v.as_ints().data(), 8 * v.as_ints().size()); break;
    case ValueType::kDoubleArray: c.bytes(v.as_doubles().data(), 8 * v.as_doubles().size()); break;
    case ValueType::kStringArray:
      c.u32(static_cast<std::uint32_t>(v.as_strings().size()));
      for (std::string_view s : v.as_strings()) {
        auto n = static_cast<std::uint32_t>(std::min(s.size(), max_length));
        c.u32(n);
        c.bytes(s.data(), n);
      }
      break;
    default: break;
  }
}

// Appends one attribute entry at `at`; returns the end of the entry, or null when it does not fit before
// `end`. Works on a local pointer (not through the writer) so that the byte stores, which may alias anything,
// do not force the cursor back to memory after each one.
std::uint8_t* put_attribute(std::uint8_t* at, const std::uint8_t* end, const Attribute& a,
                            std::size_t max_length) noexcept {
  const bool key_static = a.key.is_static();
  const ValueType type = a.value.type();
  if (key_static && (type == ValueType::kInt || type == ValueType::kDouble)) {
    // The common case, a literal key and an 8-byte number: one fixed 28-byte entry.
    constexpr std::size_t kSize = kStaticNumberAttributeBytes;
    if (static_cast<std::size_t>(end - at) < kSize) return nullptr;
    AttributeHead head{static_cast<std::uint8_t>(EntryTag::kAttribute), static_cast<std::uint8_t>(type), 1, 0,
                       static_cast<std::uint32_t>(a.key.text().size())};
    const char* key = a.key.text().data();
    const std::uint32_t eight = 8;
    std::uint64_t bits;
    if (type == ValueType::kInt) {
      std::int64_t v = a.value.as_int();
      std::memcpy(&bits, &v, 8);
    } else {
      double v = a.value.as_double();
      std::memcpy(&bits, &v, 8);
    }
    std::memcpy(at, &head, sizeof head);
    std::memcpy(at + sizeof head, &key, sizeof key);
    std::memcpy(at + sizeof head + sizeof key, &eight, sizeof eight);
    std::memcpy(at + sizeof head + sizeof key + sizeof eight, &bits, sizeof bits);
    return at + kSize;
  }
  const std::string_view key = a.key.text();
  const std::size_t n = value_bytes(a.value, max_length);
  if (static_cast<std::size_t>(end - at) < sizeof(AttributeHead) + text_bytes(key_static, key.size()) + 4 + n)
    return nullptr;
  AttributeHead head{static_cast<std::uint8_t>(EntryTag::kAttribute), static_cast<std::uint8_t>(a.value.type()),
                     static_cast<std::uint8_t>(key_static ? 1 : 0), 0, static_cast<std::uint32_t>(key.size())};
  std::memcpy(at, &head, sizeof head);
  at += sizeof head;
  if (key_static) {
    const char* pointer = key.data();
    std::memcpy(at, &pointer, sizeof pointer);
    at += sizeof pointer;
  } else {
    std::memcpy(at, key.data(), key.size());
    at += key.size();
  }
  const auto n32 = static_cast<std::uint32_t>(n);
  std::memcpy(at, &n32, 4);
  at += 4;
  switch (a.value.type()) {
    case ValueType::kInt: {
      std::int64_t v = a.value.as_int();
      std::memcpy(at, &v, 8);
      return at + 8;
    }
    case ValueType::kDouble: {
      double v = a.value.as_double();
      std::memcpy(at, &v, 8);
      return at + 8;
    }
    case ValueType::kBool: *at = a.value.as_bool() ? 1 : 0; return at + 1;
    case ValueType::kString: std::memcpy(at, a.value.as_string().data(), n); return at + n;
    default: {
      ArenaCursor c{at};
      put_array(c, a.value, max_length);
      return c.at;
    }
  }
}

bool put_attribute(ArenaWriter& w, const Attribute& a, std::size_t max_length) noexcept {
  std::uint8_t* next = put_attribute(w.cursor(), w.limit(), a, max_length);
  if (next == nullptr) return false;
  w.set_cursor(next);
  return true;
}

std::size_t max_value_length(const Limits& l) noexcept {
  return l.span_attribute_value_length ? static_cast<std::size_t>(*l.span_attribute_value_length) : SIZE_MAX;
}

// The attribute entries of an event or a link, whose AttributeCounts are at `counts` (already reserved).
void put_counted_attributes(ArenaWriter& w, std::uint8_t* counts, std::span<const Attribute> attributes,
                            std::int64_t limit, std::size_t max_length) noexcept {
  AttributeCounts c{0, 0};
  for (const Attribute& a : attributes) {
    if (c.written >= limit || !put_attribute(w, a, max_length)) {
      ++c.dropped;
      continue;
    }
    ++c.written;
  }
  std::memcpy(counts, &c, sizeof c);
}

void append_text_entry(OpenSpan& s, EntryTag tag, std::string_view text, std::uint32_t* entry_offset) noexcept {
  ArenaWriter w(s);
  if (!w.fits(sizeof(TextHead) + text.size())) return;
  *entry_offset = w.position();
  w.put(TextHead{static_cast<std::uint8_t>(tag), 0, {0, 0}, static_cast<std::uint32_t>(text.size())});
  w.bytes(text.data(), text.size());
  w.commit();
}

}  // namespace

void append_attributes(OpenSpan& s, const Limits& limits, std::span<const Attribute> attributes) noexcept {
  ArenaWriter w(s);
  std::uint8_t* at = w.cursor();
  const std::uint8_t* end = w.limit();
  const std::size_t max_length = max_value_length(limits);
  std::uint32_t count = s.header.attribute_count, dropped = 0;
  for (const Attribute& a : attributes) {
    std::uint8_t* next = count < limits.span_attribute_count ? put_attribute(at, end, a, max_length) : nullptr;
    if (next == nullptr) {
      ++dropped;
      continue;
    }
    at = next;
    ++count;
  }
  w.set_cursor(at);
  s.header.attribute_count = static_cast<std::uint16_t>(count);
  s.header.dropped_attributes += dropped;
  w.commit();
}

void append_event(OpenSpan& s, const Limits& limits, SpanName name, std::uint64_t tick,
                  std::span<const Attribute> attributes) noexcept {
  ArenaWriter w(s);
  const std::size_t fixed = sizeof(TextHead) + text_bytes(name.is_static(), name.text().size()) + sizeof(EventTail);
  if (s.header.event_count >= limits.span_event_count || !w.fits(fixed)) {
    ++s.header.dropped_events;
    return;
  }
  w.put(TextHead{static_cast<std::uint8_t>(EntryTag::kEvent),
                 static_cast<std::uint8_t>(name.is_static() ? 1 : 0),
                 {0, 0},
                 static_cast<std::uint32_t>(name.text().size())});
  put_text(w, name.text(), name.is_static());
  std::uint8_t* tail = w.cursor();
  w.put(EventTail{tick, {0, 0}});
  put_counted_attributes(w, tail + offsetof(EventTail, counts), attributes, limits.event_attribute_count,
                         max_value_length(limits));
  ++s.header.event_count;
  w.commit();
}

bool set_copied_name(OpenSpan& s, std::string_view name) noexcept {
  constexpr std::uint32_t kNoRoom = ~std::uint32_t{0};
  std::uint32_t entry = kNoRoom;
  const std::string_view text = name.substr(0, kArenaBytes / 4);
  append_text_entry(s, EntryTag::kName, text, &entry);
  if (entry == kNoRoom) return false;
  s.header.name =
      TextRef{nullptr, static_cast<std::uint32_t>(entry + sizeof(TextHead)), static_cast<std::uint32_t>(text.size())};
  return true;
}

void set_status_message(OpenSpan& s, std::string_view message) noexcept {
  std::uint32_t entry = 0;
  std::uint32_t before = s.header.arena_used;
  append_text_entry(s, EntryTag::kStatusMessage, message, &entry);
  s.header.status_message_entry = s.header.arena_used > before ? entry + 1 : 0;
}

void record_exception_entry(OpenSpan& s, const Limits& limits, std::string_view type, std::string_view message,
                            bool escaped) noexcept {
  const Attribute attributes[] = {
      {"exception.type", type}, {"exception.message", message}, {"exception.escaped", escaped}};
  append_event(s, limits, "exception", now_ticks(), attributes);
  s.header.bits |= RecordHeader::kHasException;
}

void append_link(OpenSpan& s, const Limits& limits, const SpanContext& link,
                 std::span<const Attribute> attributes) noexcept {
  ArenaWriter w(s);
  if (s.header.link_count >= limits.span_link_count || !w.fits(sizeof(LinkHead))) {
    ++s.header.dropped_links;
    return;
  }
  LinkHead head{};
  head.tag = static_cast<std::uint8_t>(EntryTag::kLink);
  std::memcpy(head.trace_id, link.trace_id.bytes.data(), sizeof head.trace_id);
  std::memcpy(head.span_id, link.span_id.bytes.data(), sizeof head.span_id);
  head.trace_flags = link.trace_flags;
  head.is_remote = link.is_remote ? 1 : 0;
  std::uint8_t* at = w.cursor();
  w.put(head);
  put_counted_attributes(w, at + offsetof(LinkHead, counts), attributes, limits.link_attribute_count,
                         max_value_length(limits));
  ++s.header.link_count;
  w.commit();
}

}  // namespace lens::internal
