#include "trace/record.h"

#include <cstddef>

#include "trace/scope_record.h"

namespace lens::internal {

using record_detail::load;
using record_detail::read_text;

std::uint32_t AttributeView::array_size() const noexcept {
  switch (type) {
    case ValueType::kBoolArray: return value_bytes;
    case ValueType::kIntArray:
    case ValueType::kDoubleArray: return value_bytes / 8;
    case ValueType::kStringArray: return load<std::uint32_t>(value);
    default: return 0;
  }
}

std::int64_t AttributeView::int_at(std::uint32_t i) const noexcept {
  return load<std::int64_t>(value + std::size_t{8} * i);
}
double AttributeView::double_at(std::uint32_t i) const noexcept { return load<double>(value + std::size_t{8} * i); }

std::string_view AttributeView::next_string(std::uint32_t& cursor) const noexcept {
  if (cursor == 0) cursor = 4;  // past the count
  auto length = load<std::uint32_t>(value + cursor);
  std::string_view s(reinterpret_cast<const char*>(value + cursor + 4), length);
  cursor += 4 + length;
  return s;
}

EventView SpanView::read_event(const std::uint8_t* at, const std::uint8_t** next) noexcept {
  EventView e;
  const auto head = load<TextHead>(at);
  const std::uint8_t* after_name;
  e.name = read_text(at + sizeof head, head.is_static != 0, head.length, &after_name);
  const auto tail = load<EventTail>(after_name);
  e.tick = tail.tick;
  e.attribute_count = tail.counts.written;
  e.dropped_attributes = tail.counts.dropped;
  e.attributes = after_name + sizeof tail;
  *next = e.attributes;
  return e;
}

LinkView SpanView::read_link(const std::uint8_t* at, const std::uint8_t** next) noexcept {
  LinkView l;
  const auto head = load<LinkHead>(at);
  std::memcpy(l.context.trace_id.bytes.data(), head.trace_id, sizeof head.trace_id);
  std::memcpy(l.context.span_id.bytes.data(), head.span_id, sizeof head.span_id);
  l.context.trace_flags = head.trace_flags;
  l.context.is_remote = head.is_remote != 0;
  l.attribute_count = head.counts.written;
  l.dropped_attributes = head.counts.dropped;
  l.attributes = at + sizeof head;
  *next = l.attributes;
  return l;
}

const std::uint8_t* SpanView::skip_entry(const std::uint8_t* at) noexcept {
  const std::uint8_t* next = at;
  switch (static_cast<EntryTag>(*at)) {
    case EntryTag::kAttribute: read_attribute(at, &next); return next;
    case EntryTag::kEvent: {
      EventView e = read_event(at, &next);
      for (std::uint32_t i = 0; i < e.attribute_count; ++i) read_attribute(next, &next);
      return next;
    }
    case EntryTag::kLink: {
      LinkView l = read_link(at, &next);
      for (std::uint32_t i = 0; i < l.attribute_count; ++i) read_attribute(next, &next);
      return next;
    }
    case EntryTag::kStatusMessage:
    case EntryTag::kName: return at + sizeof(TextHead) + load<TextHead>(at).length;
  }
  return at + 1;  // unreachable for records lens wrote
}

bool SpanView::is_overridden(const std::uint8_t* at, std::string_view key) const noexcept {
  const std::uint8_t* end = arena_ + header_.arena_used;
  while (at < end) {
    if (static_cast<EntryTag>(*at) == EntryTag::kAttribute) {
      const std::uint8_t* next;
      if (read_attribute(at, &next).key == key) return true;
      at = next;
    } else {
      at = skip_entry(at);
    }
  }
  return false;
}

// A scope record's header is written straight from the record, a whole word (or two) at a time, so that each of the
// exporter's loads of a field is served by one store. Zeroing the header and then storing its fields byte by byte made
// those loads wait (the protobuf encoder took 65 ns a span for scope records against 57 for span records), and so did
// GCC's copy of a local array of the words, with wider loads than its stores.
void SpanView::read_scope_record(const std::uint8_t* record) noexcept {
  static_assert(sizeof(RecordHeader) == 104 && offsetof(RecordHeader, trace_id) == 8 &&
                    offsetof(RecordHeader, span_id) == 24 && offsetof(RecordHeader, parent_span_id) == 32 &&
                    offsetof(RecordHeader, start_tick) == 40 && offsetof(RecordHeader, end_tick) == 48 &&
                    offsetof(RecordHeader, name) == 56 && offsetof(RecordHeader, kind) == 72 &&
                    offsetof(RecordHeader, status_code) == 73 && offsetof(RecordHeader, trace_flags) == 74 &&
                    offsetof(RecordHeader, bits) == 75 && offsetof(RecordHeader, attribute_count) == 76 &&
                    offsetof(RecordHeader, link_count) == 80 && offsetof(RecordHeader, group) == 82,
                "the words below follow RecordHeader's layout");
  std::uint64_t first_word;  // the layout trace/scope_record.h gives
  std::memcpy(&first_word, record, 8);
  const std::uint64_t attribute_count = scope_record_attribute_count(first_word);
  const std::uint64_t size = sizeof(RecordHeader);                                              // arena_used 0
  const std::uint64_t name_length = std::uint64_t{scope_record_name_length(first_word)} << 32;  // after its offset
  const std::uint64_t kind_to_counts = static_cast<std::uint64_t>(SpanKind::kInternal) |
                                       std::uint64_t{scope_record_trace_flags(first_word)} << 16 |
                                       std::uint64_t{scope_record_bits(first_word)} << 24 | attribute_count << 32;
  const std::uint64_t links_and_group = std::uint64_t{scope_record_group(first_word)} << 16;
  const std::uint64_t zero = 0;
  auto* header = reinterpret_cast<std::uint8_t*>(&header_);
  std::memcpy(header, &size, 8);
  std::memcpy(header + 8, record + 48, 16);   // trace id
  std::memcpy(header + 24, record + 32, 16);  // span id, parent span id
  std::memcpy(header + 40, record + 16, 16);  // start tick, end tick
  std::memcpy(header + 56, record + 8, 8);    // the name's pointer
  std::memcpy(header + 64, &name_length, 8);
  std::memcpy(header + 72, &kind_to_counts, 8);
  std::memcpy(header + 80, &links_and_group, 8);
  std::memcpy(header + 88, &zero, 8);
  std::memcpy(header + 96, &zero, 8);
  arena_ = nullptr;  // arena_used 0: never read
  if (attribute_count != 0) packed_attributes_ = record + kScopeRecordBytes;
}

}  // namespace lens::internal
