// The OTLP export requests, walked once for both encodings: the walk names every field by its protobuf number
// and its OTLP/JSON name, and a writer (JsonWriter in otlp_json.cc, ProtoWriter in otlp_proto.cc) puts it into
// its own format. Field numbers are those of the OpenTelemetry proto files (opentelemetry/proto/*/v1).
//
// A writer provides:
//   begin(field, name) / end()               a nested message
//   begin_list(field, name) / end_list()     a repeated message field; item_begin() / item_end() per element
//   string(field, name, text)  bytes(field, name, data, size)  (JSON: lower-case hex)
//   fixed64 / sfixed64 / int64               (JSON: decimal strings)
//   fixed32 / uint32 / enumeration / boolean / real
//   packed_fixed64(field, name, values) / packed_double(field, name, values)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <variant>

#include "lens/internal/visibility.h"
#include "lens/version.h"
#include "signals/exporter.h"
#include "trace/instrumentation_scopes.h"
#include "trace/record.h"

namespace lens::internal::otlp {

inline constexpr std::string_view kTruncatedAttribute = "nemo.span.truncated";
inline constexpr std::string_view kTruncatedReason = "still open at telemetry shutdown";

// ---- common.proto ----------------------------------------------------------------------------------------

template <typename W>
void array_element(W& w, const AttributeView& a, std::uint32_t i, std::uint32_t& cursor) {
  w.item_begin();
  switch (a.type) {
    case ValueType::kBoolArray: w.boolean(2, "boolValue", a.bool_at(i)); break;
    case ValueType::kIntArray: w.int64(3, "intValue", a.int_at(i)); break;
    case ValueType::kDoubleArray: w.real(4, "doubleValue", a.double_at(i)); break;
    default: w.string(1, "stringValue", a.next_string(cursor)); break;
  }
  w.item_end();
}

// AnyValue: string 1, bool 2, int 3, double 4, array 5 (ArrayValue: repeated AnyValue values = 1).
template <typename W>
void any_value(W& w, const AttributeView& a) {
  switch (a.type) {
    case ValueType::kBool: w.boolean(2, "boolValue", a.as_bool()); break;
    case ValueType::kInt: w.int64(3, "intValue", a.as_int()); break;
    case ValueType::kDouble: w.real(4, "doubleValue", a.as_double()); break;
    case ValueType::kString: w.string(1, "stringValue", a.as_string()); break;
    default: {
      w.begin(5, "arrayValue");
      w.begin_list(1, "values");
      std::uint32_t cursor = 0;
      for (std::uint32_t i = 0, n = a.array_size(); i < n; ++i) array_element(w, a, i, cursor);
      w.end_list();
      w.end();
    }
  }
}

template <typename W>
void owned_value(W& w, const ResourceValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) w.string(1, "stringValue", *s);
  if (auto* b = std::get_if<bool>(&v)) w.boolean(2, "boolValue", *b);
  if (auto* i = std::get_if<std::int64_t>(&v)) w.int64(3, "intValue", *i);
  if (auto* d = std::get_if<double>(&v)) w.real(4, "doubleValue", *d);
}

// One KeyValue (key 1, value 2) as an element of the current list.
template <typename W, typename Value>
void key_value(W& w, std::string_view key, Value&& write_value) {
  w.item_begin();
  w.string(1, "key", key);
  w.begin(2, "value");
  write_value();
  w.end();
  w.item_end();
}

// One span, event or link attribute as an element of the current list. A writer may write a small scalar one
// whole (ProtoWriter::scalar_attribute: its sizes are known before it is written).
template <typename W>
void general_attribute(W& w, const AttributeView& a) {
  key_value(w, a.key, [&] { any_value(w, a); });
}
template <typename W>
LENS_ALWAYS_INLINE void attribute(W& w, const AttributeView& a) {
  if constexpr (requires { w.scalar_attribute(a); }) {
    if (w.scalar_attribute(a)) return;
  }
  general_attribute(w, a);
}

template <typename W>
void owned_attributes(W& w, int field, const ResourceAttributes& attributes) {
  if (attributes.empty()) return;
  w.begin_list(field, "attributes");
  for (const auto& entry : attributes) key_value(w, entry.first, [&] { owned_value(w, entry.second); });
  w.end_list();
}

// The attributes of an event or a link (`count` entries at `at`) and their dropped count.
template <typename W>
void nested_attributes(W& w, int field, int dropped_field, const std::uint8_t* at, std::uint32_t count,
                       std::uint32_t dropped) {
  if (count > 0) {
    w.begin_list(field, "attributes");
    SpanView::for_each_attribute_at(at, count, [&](const AttributeView& a) { attribute(w, a); });
    w.end_list();
  }
  if (dropped > 0) w.uint32(dropped_field, "droppedAttributesCount", dropped);
}

// ResourceX { resource 1 { attributes 1 }, ScopeX 2 } in a request whose only field (1) is the list of ResourceX;
// `scopes` writes the ScopeX items (scope_items).
template <typename W, typename Scopes>
void request(W& w, std::string_view resource_list, std::string_view scope_list, const Resource& resource,
             Scopes&& scopes) {
  w.begin_list(1, resource_list);
  w.item_begin();
  w.begin(1, "resource");
  owned_attributes(w, 1, resource.attributes);
  w.end();
  w.begin_list(2, scope_list);
  scopes();
  w.end_list();
  w.item_end();
  w.end_list();
}

// One ScopeX { scope 1 { name 1, version 2 }, items 2 }.
template <typename W, typename Items>
void scope_items(W& w, ScopeNames scope, std::string_view items_name, Items&& items) {
  w.item_begin();
  w.begin(1, "scope");
  w.string(1, "name", scope.name);
  if (!scope.version.empty()) w.string(2, "version", scope.version);
  w.end();
  w.begin_list(2, items_name);
  items();
  w.end_list();
  w.item_end();
}

// A request of lens's own signals (metrics, logs): one ScopeX, lens's.
template <typename W, typename Items>
void lens_request(W& w, std::string_view resource_list, std::string_view scope_list, std::string_view items_name,
                  const Resource& resource, Items&& items) {
  request(w, resource_list, scope_list, resource, [&] { scope_items(w, scope_names(0), items_name, items); });
}

// ---- trace.proto -----------------------------------------------------------------------------------------

// W3C flags in bits 0-7, then "the parent's remoteness is known" (0x100) and "the parent is remote" (0x200).
inline std::uint32_t span_flags(std::uint8_t trace_flags, bool remote) {
  return trace_flags | 0x100u | (remote ? 0x200u : 0u);
}

template <typename W>
void span(W& w, const SpanView& v, const TimeMap& time) {
  const RecordHeader& h = v.header();
  const bool truncated = (h.bits & RecordHeader::kTruncated) != 0;
  const std::uint64_t end = end_unix_nanos(h, time);
  w.item_begin();
  w.bytes(1, "traceId", h.trace_id.bytes.data(), 16);
  w.bytes(2, "spanId", h.span_id.bytes.data(), 8);
  if (h.bits & RecordHeader::kHasParent) w.bytes(4, "parentSpanId", h.parent_span_id.bytes.data(), 8);
  w.fixed32(16, "flags", span_flags(h.trace_flags, (h.bits & RecordHeader::kParentRemote) != 0));
  w.string(5, "name", v.name());
  w.enumeration(6, "kind", h.kind);
  w.fixed64(7, "startTimeUnixNano", start_unix_nanos(h, time));
  w.fixed64(8, "endTimeUnixNano", end);
  if (h.attribute_count > 0 || truncated) {
    w.begin_list(9, "attributes");
    v.for_each_attribute([&](const AttributeView& a) __attribute__((always_inline)) { attribute(w, a); });
    if (truncated) key_value(w, kTruncatedAttribute, [&] { w.boolean(2, "boolValue", true); });
    w.end_list();
  }
  if (h.dropped_attributes > 0) w.uint32(10, "droppedAttributesCount", h.dropped_attributes);
  if (h.event_count > 0 || truncated) {
    w.begin_list(11, "events");  // Event { time 1, name 2, attributes 3, dropped 4 }
    v.for_each_event([&](const EventView& e) {
      w.item_begin();
      w.fixed64(1, "timeUnixNano", time.to_unix_nanos(e.tick));
      w.string(2, "name", e.name);
      nested_attributes(w, 3, 4, e.attributes, e.attribute_count, e.dropped_attributes);
      w.item_end();
    });
    if (truncated) {
      w.item_begin();
      w.fixed64(1, "timeUnixNano", end);
      w.string(2, "name", kTruncatedAttribute);
      w.begin_list(3, "attributes");
      key_value(w, "reason", [&] { w.string(1, "stringValue", kTruncatedReason); });
      w.end_list();
      w.item_end();
    }
    w.end_list();
  }
  if (h.dropped_events > 0) w.uint32(12, "droppedEventsCount", h.dropped_events);
  if (h.link_count > 0) {
    w.begin_list(13, "links");  // Link { trace_id 1, span_id 2, attributes 4, dropped 5, flags 6 }
    v.for_each_link([&](const LinkView& l) {
      w.item_begin();
      w.bytes(1, "traceId", l.context.trace_id.bytes.data(), 16);
      w.bytes(2, "spanId", l.context.span_id.bytes.data(), 8);
      nested_attributes(w, 4, 5, l.attributes, l.attribute_count, l.dropped_attributes);
      w.fixed32(6, "flags", span_flags(l.context.trace_flags, l.context.is_remote));
      w.item_end();
    });
    w.end_list();
  }
  if (h.dropped_links > 0) w.uint32(14, "droppedLinksCount", h.dropped_links);
  w.begin(15, "status");  // Status { message 2, code 3 }
  if (!v.status_message().empty()) w.string(2, "message", v.status_message());
  if (h.status_code != 0) w.enumeration(3, "code", h.status_code);
  w.end();
  w.item_end();
}

// A record's instrumentation scope, read without decoding it (a scope record is always lens's own).
inline std::uint16_t scope_of(const std::uint8_t* record) noexcept {
  if (record[0] == kScopeRecordMark) return 0;
  std::uint16_t scope;
  std::memcpy(&scope, record + offsetof(RecordHeader, scope), sizeof scope);
  return scope < kMaxInstrumentationScopes ? scope : 0;
}

// The spans grouped by instrumentation scope, a ScopeSpans each, in the order the scopes first appear: one pass
// over the batch when every span is in one scope (the usual batch), one more per further scope.
template <typename W>
void traces(W& w, const ExportBatch& batch) {
  request(w, "resourceSpans", "scopeSpans", batch.resource, [&] {
    std::uint16_t order[kMaxInstrumentationScopes];
    bool seen[kMaxInstrumentationScopes] = {};
    std::size_t scopes = 0;
    for (const std::uint8_t* record : batch.spans) {
      const std::uint16_t id = scope_of(record);
      if (!seen[id]) {
        seen[id] = true;
        order[scopes++] = id;
      }
    }
    if (scopes == 0) order[scopes++] = 0;  // an empty batch: lens's ScopeSpans, with no span
    for (std::size_t i = 0; i < scopes; ++i) {
      scope_items(w, scope_names(order[i]), "spans", [&] {
        for (const std::uint8_t* record : batch.spans)
          if (scopes == 1 || scope_of(record) == order[i]) span(w, SpanView(record), batch.time);
      });
    }
  });
}

// ---- metrics.proto ---------------------------------------------------------------------------------------

template <typename W>
void point_head(W& w, int attributes_field, const MetricPoint& p) {
  w.item_begin();
  owned_attributes(w, attributes_field, p.attributes);
  w.fixed64(2, "startTimeUnixNano", p.start_unix_nanos);
  w.fixed64(3, "timeUnixNano", p.time_unix_nanos);
}

template <typename W>
void metric(W& w, const MetricData& m) {
  w.item_begin();  // Metric { name 1, description 2, unit 3, gauge 5 | sum 7 | histogram 9 }
  w.string(1, "name", m.name);
  if (!m.description.empty()) w.string(2, "description", m.description);
  if (!m.unit.empty()) w.string(3, "unit", m.unit);
  const int temporality = m.delta ? 1 : 2;  // AGGREGATION_TEMPORALITY_DELTA = 1, CUMULATIVE = 2
  if (m.kind == InstrumentKind::kHistogram) {
    w.begin(
        9,
        "histogram");  // HistogramDataPoint { attributes 9, ..., count 4, sum 5, buckets 6, bounds 7, min 11, max 12 }
    w.begin_list(1, "dataPoints");
    for (const MetricPoint& p : m.points) {
      point_head(w, 9, p);
      w.fixed64(4, "count", p.count);
      w.real(5, "sum", p.sum);
      w.packed_fixed64(6, "bucketCounts", p.bucket_counts);
      w.packed_double(7, "explicitBounds", m.bounds);
      if (p.count > 0) {
        w.real(11, "min", p.min);
        w.real(12, "max", p.max);
      }
      w.item_end();
    }
    w.end_list();
    w.enumeration(2, "aggregationTemporality", temporality);
    w.end();
  } else {
    const bool gauge = m.kind == InstrumentKind::kGauge;
    w.begin(gauge ? 5 : 7, gauge ? "gauge" : "sum");  // NumberDataPoint { attributes 7, as_double 4, as_int 6 }
    w.begin_list(1, "dataPoints");
    for (const MetricPoint& p : m.points) {
      point_head(w, 7, p);
      if (m.integer)
        w.sfixed64(6, "asInt", p.int_value);
      else
        w.real(4, "asDouble", p.double_value);
      w.item_end();
    }
    w.end_list();
    if (!gauge) {
      w.enumeration(2, "aggregationTemporality", temporality);
      w.boolean(3, "isMonotonic", m.monotonic);
    }
    w.end();
  }
  w.item_end();
}

template <typename W>
void metrics(W& w, const MetricsBatch& batch) {
  lens_request(w, "resourceMetrics", "scopeMetrics", "metrics", batch.resource, [&] {
    for (const MetricData& m : batch.metrics) metric(w, m);
  });
}

// ---- logs.proto ------------------------------------------------------------------------------------------

template <typename W>
void log_record(W& w, const LogRecordData& r) {
  // LogRecord { time 1, severity_number 2, severity_text 3, body 5, attributes 6, flags 8, trace_id 9,
  //             span_id 10, observed_time 11 }
  w.item_begin();
  w.fixed64(1, "timeUnixNano", r.time_unix_nanos);
  w.fixed64(11, "observedTimeUnixNano", r.observed_unix_nanos);
  if (r.severity_number > 0) w.enumeration(2, "severityNumber", r.severity_number);
  if (!r.severity_text.empty()) w.string(3, "severityText", r.severity_text);
  w.begin(5, "body");
  w.string(1, "stringValue", r.body);
  w.end();
  owned_attributes(w, 6, r.attributes);
  if (r.span.is_valid()) {
    w.bytes(9, "traceId", r.span.trace_id.bytes.data(), 16);
    w.bytes(10, "spanId", r.span.span_id.bytes.data(), 8);
    w.fixed32(8, "flags", r.span.trace_flags & SpanContext::kSampledFlag);
  }
  w.item_end();
}

template <typename W>
void logs(W& w, const LogsBatch& batch) {
  lens_request(w, "resourceLogs", "scopeLogs", "logRecords", batch.resource, [&] {
    for (const LogRecordData& r : batch.logs) log_record(w, r);
  });
}

}  // namespace lens::internal::otlp
