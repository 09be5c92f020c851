// The spans of an export batch as plain values (lens/internal/span_batch.h): the records read as the OTLP walk
// reads them (export/otlp_walk.h), into scratch vectors reused from span to span.
#include "lens/internal/span_batch.h"

#include <memory>
#include <utility>
#include <vector>

#include "export/otlp_walk.h"
#include "signals/exporter.h"
#include "trace/instrumentation_scopes.h"
#include "trace/record.h"

namespace lens::internal {
namespace {

// An array attribute's elements, decoded out of the record (its numbers need not be aligned there).
struct ArrayScratch {
  std::vector<std::int64_t> ints;
  std::vector<double> doubles;
  std::vector<std::string_view> strings;
  // std::vector<bool> has no span: each bool array is copied into this.
  std::vector<std::unique_ptr<bool[]>> bools;
};

class SpanReader {
 public:
  void read(const SpanView& v, const TimeMap& time, const std::function<void(const FinishedSpan&)>& visit) {
    clear();
    const RecordHeader& h = v.header();
    const bool truncated = (h.bits & RecordHeader::kTruncated) != 0;
    FinishedSpan span;
    span.context.trace_id = h.trace_id;
    span.context.span_id = h.span_id;
    span.context.trace_flags = h.trace_flags;
    if (h.bits & RecordHeader::kHasParent) span.parent_span_id = h.parent_span_id;
    span.parent_is_remote = (h.bits & RecordHeader::kParentRemote) != 0;
    span.name = v.name();
    span.kind = static_cast<SpanKind>(h.kind);
    span.start_unix_nanos = start_unix_nanos(h, time);
    span.end_unix_nanos = end_unix_nanos(h, time);
    span.status_code = static_cast<StatusCode>(h.status_code);
    span.status_message = v.status_message();
    span.scope_id = h.scope < kMaxInstrumentationScopes ? h.scope : 0;
    const ScopeNames scope = scope_names(span.scope_id);
    span.scope_name = scope.name;
    span.scope_version = scope.version;

    v.for_each_attribute([&](const AttributeView& a) { attributes_.push_back(attribute(a)); });
    if (truncated) attributes_.push_back({otlp::kTruncatedAttribute, true});
    const std::size_t span_attributes = attributes_.size();
    // Events and links point into attributes_ by index until it stops growing.
    std::vector<std::pair<std::size_t, std::size_t>>& ranges = ranges_;
    v.for_each_event([&](const EventView& e) {
      ranges.push_back(nested(e.attributes, e.attribute_count));
      events_.push_back({e.name, time.to_unix_nanos(e.tick), {}});
    });
    if (truncated) {
      const std::size_t first = attributes_.size();
      attributes_.push_back({"reason", otlp::kTruncatedReason});
      ranges.push_back({first, 1});
      events_.push_back({otlp::kTruncatedAttribute, span.end_unix_nanos, {}});
    }
    v.for_each_link([&](const LinkView& l) {
      ranges.push_back(nested(l.attributes, l.attribute_count));
      links_.push_back({l.context, {}});
    });
    const std::span<const Attribute> all(attributes_);
    std::size_t r = 0;
    for (FinishedEvent& e : events_) e.attributes = all.subspan(ranges[r].first, ranges[r].second), ++r;
    for (FinishedLink& l : links_) l.attributes = all.subspan(ranges[r].first, ranges[r].second), ++r;
    span.attributes = all.first(span_attributes);
    span.events = events_;
    span.links = links_;
    visit(span);
  }

 private:
  void clear() {
    attributes_.clear();
    events_.clear();
    links_.clear();
    ranges_.clear();
    arrays_.clear();
  }

  std::pair<std::size_t, std::size_t> nested(const std::uint8_t* at, std::uint32_t count) {
    const std::size_t first = attributes_.size();
    SpanView::for_each_attribute_at(at, count, [&](const AttributeView& a) { attributes_.push_back(attribute(a)); });
    return {first, attributes_.size() - first};
  }

  // An attribute whose array values, if any, live in arrays_ (one scratch per array, kept until the next span).
  Attribute attribute(const AttributeView& a) {
    const AttributeKey key(a.key);
    switch (a.type) {
      case ValueType::kBool: return {key, a.as_bool()};
      case ValueType::kInt: return {key, a.as_int()};
      case ValueType::kDouble: return {key, a.as_double()};
      case ValueType::kString: return {key, a.as_string()};
      default: break;
    }
    ArrayScratch& s = arrays_.emplace_back();
    const std::uint32_t n = a.array_size();
    switch (a.type) {
      case ValueType::kBoolArray: {
        auto& copy = s.bools.emplace_back(std::make_unique<bool[]>(n));
        for (std::uint32_t i = 0; i < n; ++i) copy[i] = a.bool_at(i);
        return {key, std::span<const bool>(copy.get(), n)};
      }
      case ValueType::kIntArray:
        for (std::uint32_t i = 0; i < n; ++i) s.ints.push_back(a.int_at(i));
        return {key, std::span<const std::int64_t>(s.ints)};
      case ValueType::kDoubleArray:
        for (std::uint32_t i = 0; i < n; ++i) s.doubles.push_back(a.double_at(i));
        return {key, std::span<const double>(s.doubles)};
      default: {
        std::uint32_t cursor = 0;
        for (std::uint32_t i = 0; i < n; ++i) s.strings.push_back(a.next_string(cursor));
        return {key, std::span<const std::string_view>(s.strings)};
      }
    }
  }

  std::vector<Attribute> attributes_;
  std::vector<FinishedEvent> events_;
  std::vector<FinishedLink> links_;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;
  std::vector<ArrayScratch> arrays_;  // moved as it grows: the elements' own buffers stay where they are
};

}  // namespace

void for_each_finished_span(const ExportBatch& batch, const std::function<void(const FinishedSpan&)>& visit) {
  SpanReader reader;
  for (const std::uint8_t* record : batch.spans) reader.read(SpanView(record), batch.time, visit);
}

const ResourceAttributes& batch_resource(const ExportBatch& batch) noexcept { return batch.resource.attributes; }

}  // namespace lens::internal
