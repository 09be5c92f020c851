// lens/internal/span_batch.h: the spans of one export batch as plain values. Not for users: its types change with
// lens. lens's Python package reads each batch through it to build the OpenTelemetry SDK's ReadableSpans for a
// SpanExporter given to setup (SetupOptions::span_batch_sink), with no encoding between.
//
//   options.span_batch_sink = [](const lens::internal::ExportBatch& batch) {
//     lens::internal::for_each_finished_span(batch, [](const lens::internal::FinishedSpan& span) { ... });
//     return true;
//   };
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "lens/attributes.h"
#include "lens/context.h"
#include "lens/internal/visibility.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace lens::internal {

struct ExportBatch;

struct FinishedEvent {
  std::string_view name;
  std::uint64_t unix_nanos = 0;
  std::span<const Attribute> attributes;
};

struct FinishedLink {
  SpanContext context;
  std::span<const Attribute> attributes;
};

// One span as an exporter sees it: what the OTLP encoders write, read from the same record. A span still open at
// shutdown carries the `nemo.span.truncated` attribute and event, as in OTLP.
struct FinishedSpan {
  SpanContext context;
  SpanId parent_span_id;  // invalid: a root
  bool parent_is_remote = false;
  std::string_view name;
  SpanKind kind = SpanKind::kInternal;
  std::uint64_t start_unix_nanos = 0, end_unix_nanos = 0;
  std::span<const Attribute> attributes;
  std::span<const FinishedEvent> events;
  std::span<const FinishedLink> links;
  StatusCode status_code = StatusCode::kUnset;
  std::string_view status_message;
  // The instrumentation scope it was recorded under (the tracer that made it; id 0: lens's own).
  std::uint16_t scope_id = 0;
  std::string_view scope_name, scope_version;
};

// Calls `visit` with each span of `batch` in order. What a FinishedSpan points to lives until `visit` returns.
LENS_API void for_each_finished_span(const ExportBatch& batch, const std::function<void(const FinishedSpan&)>& visit);

// The resource every span of `batch` belongs to.
LENS_API const ResourceAttributes& batch_resource(const ExportBatch& batch) noexcept;

}  // namespace lens::internal
