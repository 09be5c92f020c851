#include "export/otlp_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "lens/version.h"
#include "trace/record.h"

namespace lens::internal {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Two hex digits per byte value, so ids are written two characters at a time.
struct HexTable {
  char pairs[256][2];
  constexpr HexTable() : pairs() {
    for (int i = 0; i < 256; ++i) {
      pairs[i][0] = kHex[i >> 4];
      pairs[i][1] = kHex[i & 15];
    }
  }
};
constexpr HexTable kHexPairs;

// A JSON writer that appends to a reused string through a raw cursor: the string is grown ahead (rarely once
// it has reached a batch's size) and trimmed at the end, so each character costs a store, not a call.
class Json {
 public:
  explicit Json(std::string& out) : out_(out), len_(out.size()) {}
  ~Json() { out_.resize(len_); }

  template <std::size_t N>
  Json& key(const char (&k)[N]) {  // `,"k":` with the comma when needed
    char* p = room(N + 4);
    if (!first_) *p++ = ',';
    *p++ = '"';
    std::memcpy(p, k, N - 1);
    p += N - 1;
    *p++ = '"';
    *p++ = ':';
    done(p);
    first_ = true;  // the value follows, no comma before it
    return *this;
  }
  Json& open(char c) {
    char* p = room(2);
    if (!first_) *p++ = ',';
    *p++ = c;
    done(p);
    first_ = true;
    return *this;
  }
  Json& close(char c) {
    *room(1) = c;
    ++len_;
    first_ = false;
    return *this;
  }
  Json& string(std::string_view s) {
    char* p = room(3);
    if (!first_) *p++ = ',';
    *p++ = '"';
    done(p);
    escape(s);
    p = room(1);
    *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  Json& hex(const std::uint8_t* bytes, std::size_t n) {
    char* p = room(2 * n + 3);
    if (!first_) *p++ = ',';
    *p++ = '"';
    for (std::size_t i = 0; i < n; ++i, p += 2) std::memcpy(p, kHexPairs.pairs[bytes[i]], 2);
    *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  template <typename Int>
  Json& integer(Int v, bool quoted) {  // OTLP/JSON: 64-bit integers are strings
    char* p = room(24);
    if (!first_) *p++ = ',';
    if (quoted) *p++ = '"';
    p = std::to_chars(p, p + 21, v).ptr;
    if (quoted) *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  Json& u64_string(std::uint64_t v) { return integer(v, true); }
  Json& i64_string(std::int64_t v) { return integer(v, true); }
  Json& number(std::uint64_t v) { return integer(v, false); }
  Json& real(double v) {  // proto3 JSON: NaN and infinities as strings
    if (std::isnan(v)) return string("NaN");
    if (std::isinf(v)) return string(v > 0 ? "Infinity" : "-Infinity");
    char* p = room(34);
    if (!first_) *p++ = ',';
    p = std::to_chars(p, p + 32, v).ptr;
    done(p);
    first_ = false;
    return *this;
  }
  Json& boolean(bool v) {
    char* p = room(6);
    if (!first_) *p++ = ',';
    std::memcpy(p, v ? "true" : "false", v ? 4 : 5);
    done(p + (v ? 4 : 5));
    first_ = false;
    return *this;
  }

 private:
  // A cursor with at least n writable bytes.
  char* room(std::size_t n) {
    if (len_ + n > out_.size()) out_.resize(std::max(2 * out_.size(), len_ + n + 65536));
    return out_.data() + len_;
  }
  void done(char* p) { len_ = static_cast<std::size_t>(p - out_.data()); }

  // JSON string escaping; invalid UTF-8 becomes U+FFFD so every line stays valid JSON.
  void escape(std::string_view s) {
    char* p = room(6 * s.size());  // the worst case: every byte escaped
    for (std::size_t i = 0; i < s.size();) {
      auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
        *p++ = static_cast<char>(c);
        ++i;
      } else if (c == '"' || c == '\\') {
        *p++ = '\\';
        *p++ = static_cast<char>(c);
        ++i;
      } else if (c < 0x20) {
        const char* named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f" : nullptr;
        if (named) {
          std::memcpy(p, named, 2);
          p += 2;
        } else {
          std::memcpy(p, "\\u00", 4);
          std::memcpy(p + 4, kHexPairs.pairs[c], 2);
          p += 6;
        }
        ++i;
      } else {
        std::size_t n = utf8_sequence_length(s, i);
        if (n == 0) {
          std::memcpy(p, "\xEF\xBF\xBD", 3);  // U+FFFD
          p += 3;
          ++i;
        } else {
          std::memcpy(p, s.data() + i, n);
          p += n;
          i += n;
        }
      }
    }
    done(p);
  }
  static std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    return n;
  }

  std::string& out_;
  std::size_t len_;
  bool first_ = true;
};

void any_value(Json& j, const AttributeView& a) {
  j.open('{');
  switch (a.type) {
    case ValueType::kBool: j.key("boolValue").boolean(a.as_bool()); break;
    case ValueType::kInt: j.key("intValue").i64_string(a.as_int()); break;
    case ValueType::kDouble: j.key("doubleValue").real(a.as_double()); break;
    case ValueType::kString: j.key("stringValue").string(a.as_string()); break;
    default: {
      j.key("arrayValue").open('{').key("values").open('[');
      std::uint32_t n = a.array_size();
      std::uint32_t cursor = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        j.open('{');
        switch (a.type) {
          case ValueType::kBoolArray: j.key("boolValue").boolean(a.bool_at(i)); break;
          case ValueType::kIntArray: j.key("intValue").i64_string(a.int_at(i)); break;
          case ValueType::kDoubleArray: j.key("doubleValue").real(a.double_at(i)); break;
          default: j.key("stringValue").string(a.next_string(cursor)); break;
        }
        j.close('}');
      }
      j.close(']').close('}');
    }
  }
  j.close('}');
}

void attribute(Json& j, const AttributeView& a) {
  j.open('{').key("key").string(a.key).key("value");
  any_value(j, a);
  j.close('}');
}

void string_attribute(Json& j, std::string_view key, std::string_view value) {
  j.open('{').key("key").string(key).key("value").open('{').key("stringValue").string(value).close('}').close('}');
}

void resource_value(Json& j, const ResourceValue& v) {
  j.open('{');
  if (auto* s = std::get_if<std::string>(&v)) j.key("stringValue").string(*s);
  if (auto* b = std::get_if<bool>(&v)) j.key("boolValue").boolean(*b);
  if (auto* i = std::get_if<std::int64_t>(&v)) j.key("intValue").i64_string(*i);
  if (auto* d = std::get_if<double>(&v)) j.key("doubleValue").real(*d);
  j.close('}');
}

void nested_attributes(Json& j, const std::uint8_t* at, std::uint32_t count, std::uint32_t dropped) {
  if (count > 0) {
    j.key("attributes").open('[');
    SpanView::for_each_attribute_at(at, count, [&](const AttributeView& a) { attribute(j, a); });
    j.close(']');
  }
  if (dropped > 0) j.key("droppedAttributesCount").number(dropped);
}

// W3C flags in bits 0-7, then "the parent's remoteness is known" and "the parent is remote" (OTLP SpanFlags).
std::uint32_t span_flags(const RecordHeader& h) {
  std::uint32_t flags = h.trace_flags | 0x100u;
  if (h.bits & RecordHeader::kParentRemote) flags |= 0x200u;
  return flags;
}

void span(Json& j, const SpanView& v, const TimeMap& time) {
  const RecordHeader& h = v.header();
  j.open('{');
  j.key("traceId").hex(h.trace_id.bytes.data(), 16);
  j.key("spanId").hex(h.span_id.bytes.data(), 8);
  if (h.bits & RecordHeader::kHasParent) j.key("parentSpanId").hex(h.parent_span_id.bytes.data(), 8);
  j.key("flags").number(span_flags(h));
  j.key("name").string(v.name());
  j.key("kind").number(h.kind);
  std::uint64_t end = time.to_unix_nanos(h.end_tick);
  j.key("startTimeUnixNano").u64_string(time.to_unix_nanos(h.start_tick));
  j.key("endTimeUnixNano").u64_string(end);
  bool truncated = (h.bits & RecordHeader::kTruncated) != 0;
  if (h.attribute_count > 0 || truncated) {
    j.key("attributes").open('[');
    v.for_each_attribute([&](const AttributeView& a) { attribute(j, a); });
    if (truncated) {
      j.open('{').key("key").string(kTruncatedAttribute).key("value").open('{').key("boolValue").boolean(true);
      j.close('}').close('}');
    }
    j.close(']');
  }
  if (h.dropped_attributes > 0) j.key("droppedAttributesCount").number(h.dropped_attributes);
  if (h.event_count > 0 || truncated) {
    j.key("events").open('[');
    v.for_each_event([&](const EventView& e) {
      j.open('{').key("timeUnixNano").u64_string(time.to_unix_nanos(e.tick)).key("name").string(e.name);
      nested_attributes(j, e.attributes, e.attribute_count, e.dropped_attributes);
      j.close('}');
    });
    if (truncated) {
      j.open('{').key("timeUnixNano").u64_string(end).key("name").string(kTruncatedAttribute);
      j.key("attributes").open('[');
      string_attribute(j, "reason", kTruncatedReason);
      j.close(']').close('}');
    }
    j.close(']');
  }
  if (h.dropped_events > 0) j.key("droppedEventsCount").number(h.dropped_events);
  if (h.link_count > 0) {
    j.key("links").open('[');
    v.for_each_link([&](const LinkView& l) {
      j.open('{').key("traceId").hex(l.context.trace_id.bytes.data(), 16);
      j.key("spanId").hex(l.context.span_id.bytes.data(), 8);
      nested_attributes(j, l.attributes, l.attribute_count, l.dropped_attributes);
      j.key("flags").number(l.context.trace_flags | 0x100u | (l.context.is_remote ? 0x200u : 0u));
      j.close('}');
    });
    j.close(']');
  }
  if (h.dropped_links > 0) j.key("droppedLinksCount").number(h.dropped_links);
  j.key("status").open('{');
  if (h.status_code != 0) j.key("code").number(h.status_code);
  if (!v.status_message().empty()) j.key("message").string(v.status_message());
  j.close('}');
  j.close('}');
}

void owned_attributes(Json& j, const ResourceAttributes& attributes) {
  j.key("attributes").open('[');
  for (const auto& [k, v] : attributes) {
    j.open('{').key("key").string(k).key("value");
    resource_value(j, v);
    j.close('}');
  }
  j.close(']');
}

// `"resource":{...},` and `"scope":{...}` around the signal's list: the frame all three requests share.
template <std::size_t A, std::size_t B, std::size_t C, typename F>
void request(Json& j, const char (&resource_list)[A], const char (&scope_list)[B], const char (&items)[C],
             const Resource& resource, F&& write_items) {
  j.open('{').key(resource_list).open('[').open('{');
  j.key("resource").open('{');
  owned_attributes(j, resource.attributes);
  j.close('}');
  j.key(scope_list).open('[').open('{');
  j.key("scope").open('{').key("name").string("lens").key("version").string(LENS_VERSION_STRING).close('}');
  j.key(items).open('[');
  write_items();
  j.close(']').close('}').close(']');
  j.close('}').close(']').close('}');
}

void data_point_head(Json& j, const MetricPoint& p) {
  j.open('{');
  if (!p.attributes.empty()) owned_attributes(j, p.attributes);
  j.key("startTimeUnixNano").u64_string(p.start_unix_nanos).key("timeUnixNano").u64_string(p.time_unix_nanos);
}

void metric(Json& j, const MetricData& m) {
  j.open('{').key("name").string(m.name);
  if (!m.description.empty()) j.key("description").string(m.description);
  if (!m.unit.empty()) j.key("unit").string(m.unit);
  const bool delta = m.delta;
  switch (m.kind) {
    case InstrumentKind::kCounter:
    case InstrumentKind::kUpDownCounter:
    case InstrumentKind::kGauge: {
      bool gauge = m.kind == InstrumentKind::kGauge;
      if (gauge)
        j.key("gauge");
      else
        j.key("sum");
      j.open('{').key("dataPoints").open('[');
      for (const MetricPoint& p : m.points) {
        data_point_head(j, p);
        if (m.integer)
          j.key("asInt").i64_string(p.int_value);
        else
          j.key("asDouble").real(p.double_value);
        j.close('}');
      }
      j.close(']');
      if (!gauge) j.key("aggregationTemporality").number(delta ? 1 : 2).key("isMonotonic").boolean(m.monotonic);
      j.close('}');
      break;
    }
    case InstrumentKind::kHistogram: {
      j.key("histogram").open('{').key("dataPoints").open('[');
      for (const MetricPoint& p : m.points) {
        data_point_head(j, p);
        j.key("count").u64_string(p.count).key("sum").real(p.sum);
        j.key("bucketCounts").open('[');
        for (std::uint64_t c : p.bucket_counts) j.u64_string(c);
        j.close(']').key("explicitBounds").open('[');
        for (double b : m.bounds) j.real(b);
        j.close(']');
        if (p.count > 0) j.key("min").real(p.min).key("max").real(p.max);
        j.close('}');
      }
      j.close(']').key("aggregationTemporality").number(delta ? 1 : 2).close('}');
      break;
    }
  }
  j.close('}');
}

void log_record(Json& j, const LogRecordData& r) {
  j.open('{').key("timeUnixNano").u64_string(r.time_unix_nanos);
  j.key("observedTimeUnixNano").u64_string(r.observed_unix_nanos);
  if (r.severity_number > 0) j.key("severityNumber").number(static_cast<std::uint64_t>(r.severity_number));
  if (!r.severity_text.empty()) j.key("severityText").string(r.severity_text);
  j.key("body").open('{').key("stringValue").string(r.body).close('}');
  if (!r.attributes.empty()) owned_attributes(j, r.attributes);
  if (r.span.is_valid()) {
    j.key("traceId").hex(r.span.trace_id.bytes.data(), 16);
    j.key("spanId").hex(r.span.span_id.bytes.data(), 8);
    j.key("flags").number(r.span.trace_flags & SpanContext::kSampledFlag);
  }
  j.close('}');
}

}  // namespace

void encode_metrics_json(const MetricsBatch& batch, std::string& out) {
  Json j(out);
  request(j, "resourceMetrics", "scopeMetrics", "metrics", batch.resource, [&] {
    for (const MetricData& m : batch.metrics) metric(j, m);
  });
}

void encode_logs_json(const LogsBatch& batch, std::string& out) {
  Json j(out);
  request(j, "resourceLogs", "scopeLogs", "logRecords", batch.resource, [&] {
    for (const LogRecordData& r : batch.logs) log_record(j, r);
  });
}

void encode_traces_json(const ExportBatch& batch, std::string& out) {
  Json j(out);
  request(j, "resourceSpans", "scopeSpans", "spans", batch.resource, [&] {
    for (const std::uint8_t* record : batch.spans) span(j, SpanView(record), batch.time);
  });
}

}  // namespace lens::internal
