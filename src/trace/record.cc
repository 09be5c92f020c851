#include "trace/record.h"

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

void SpanView::read_scope_record(const std::uint8_t* record) noexcept {
  std::uint64_t w[8];  // the layout trace/scope_record.h gives, then the packed attributes
  std::memcpy(w, record, sizeof w);
  header_ = RecordHeader{};
  header_.size = sizeof(RecordHeader);
  header_.bits = scope_record_bits(w[0]);
  header_.trace_flags = scope_record_trace_flags(w[0]);
  header_.group = scope_record_group(w[0]);
  header_.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  const char* name;
  std::memcpy(&name, &w[1], sizeof name);
  header_.name = TextRef{name, 0, scope_record_name_length(w[0])};
  header_.start_tick = w[2];
  header_.end_tick = w[3];
  std::memcpy(header_.span_id.bytes.data(), &w[4], 8);
  std::memcpy(header_.parent_span_id.bytes.data(), &w[5], 8);
  std::memcpy(header_.trace_id.bytes.data(), &w[6], 16);
  arena_ = nullptr;  // arena_used 0: never read
  header_.attribute_count = static_cast<std::uint16_t>(scope_record_attribute_count(w[0]));
  if (header_.attribute_count != 0) packed_attributes_ = record + kScopeRecordBytes;
}

}  // namespace lens::internal
