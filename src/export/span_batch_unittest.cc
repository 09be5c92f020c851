// lens/internal/span_batch.h reads a batch as the OTLP/JSON encoder writes it: one batch handed to a sink, read
// both ways, every field compared (attributes of every type, events, links, status, kind, parent, times, and the
// marks of a span still open at shutdown).
#include "lens/internal/span_batch.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "export/otlp_json.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"
#include "support/capture.h"

namespace lens {
namespace {

using nlohmann::json;
namespace mg = megatron::group;

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  std::string out;
  char digits[3];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", bytes[i]);
    out += digits;
  }
  return out;
}

// An attribute value as OTLP/JSON writes it (AnyValue).
json any_value(const AttributeValue& v) {
  auto array = [](auto values, auto one) {
    json items = json::array();
    for (const auto& x : values) items.push_back(one(x));
    return json{{"arrayValue", {{"values", items}}}};
  };
  switch (v.type()) {
    case ValueType::kBool: return {{"boolValue", v.as_bool()}};
    case ValueType::kInt: return {{"intValue", std::to_string(v.as_int())}};
    case ValueType::kDouble: return {{"doubleValue", v.as_double()}};
    case ValueType::kString: return {{"stringValue", std::string(v.as_string())}};
    case ValueType::kBoolArray: return array(v.as_bools(), [](bool b) { return json{{"boolValue", b}}; });
    case ValueType::kIntArray:
      return array(v.as_ints(), [](std::int64_t i) { return json{{"intValue", std::to_string(i)}}; });
    case ValueType::kDoubleArray: return array(v.as_doubles(), [](double d) { return json{{"doubleValue", d}}; });
    case ValueType::kStringArray:
      return array(v.as_strings(), [](std::string_view s) { return json{{"stringValue", std::string(s)}}; });
  }
  return nullptr;
}

json attributes(std::span<const Attribute> attributes) {
  json out = json::array();
  for (const Attribute& a : attributes)
    out.push_back({{"key", std::string(a.key.text())}, {"value", any_value(a.value)}});
  return out;
}

// A FinishedSpan in OTLP/JSON's terms, the fields both readings have (the encoder's flags and empty lists aside).
json as_otlp(const internal::FinishedSpan& s) {
  json span = {{"traceId", hex(s.context.trace_id.bytes.data(), 16)},
               {"spanId", hex(s.context.span_id.bytes.data(), 8)},
               {"name", std::string(s.name)},
               {"kind", static_cast<int>(s.kind)},
               {"startTimeUnixNano", std::to_string(s.start_unix_nanos)},
               {"endTimeUnixNano", std::to_string(s.end_unix_nanos)},
               {"attributes", attributes(s.attributes)},
               {"status", json::object()}};
  if (s.parent_span_id.is_valid()) span["parentSpanId"] = hex(s.parent_span_id.bytes.data(), 8);
  for (const internal::FinishedEvent& e : s.events)
    span["events"].push_back({{"name", std::string(e.name)},
                              {"timeUnixNano", std::to_string(e.unix_nanos)},
                              {"attributes", attributes(e.attributes)}});
  for (const internal::FinishedLink& l : s.links)
    span["links"].push_back({{"traceId", hex(l.context.trace_id.bytes.data(), 16)},
                             {"spanId", hex(l.context.span_id.bytes.data(), 8)},
                             {"attributes", attributes(l.attributes)}});
  if (!s.status_message.empty()) span["status"]["message"] = std::string(s.status_message);
  if (s.status_code != StatusCode::kUnset) span["status"]["code"] = static_cast<int>(s.status_code);
  return span;
}

// The encoder's span with the fields as_otlp has: empty lists written as [] and the flags dropped.
json comparable(json span) {
  span.erase("flags");
  if (!span.contains("attributes")) span["attributes"] = json::array();
  for (const char* list : {"events", "links"})
    for (json& item : span[list]) {
      item.erase("flags");
      if (!item.contains("attributes")) item["attributes"] = json::array();
    }
  if (span["events"].is_null()) span.erase("events");
  if (span["links"].is_null()) span.erase("links");
  return span;
}

TEST(SpanBatch, ReadsEveryFieldAsTheOtlpEncoderWritesIt) {
  std::vector<json> read, encoded;
  SetupOptions options{.rank = 0, .world_size = 1, .reinit = true};
  options.span_batch_sink = [&](const internal::ExportBatch& batch) {
    internal::for_each_finished_span(batch, [&](const internal::FinishedSpan& s) { read.push_back(as_otlp(s)); });
    std::string text;
    internal::encode_traces_json(batch, text);
    const json request = json::parse(text);
    for (const json& s : request["resourceSpans"][0]["scopeSpans"][0]["spans"]) encoded.push_back(comparable(s));
    EXPECT_EQ(internal::batch_resource(batch).empty(), false);
    return true;
  };
  Config config = testing::capture_config();
  config.metrics_enabled = config.logs_enabled = false;  // the sink takes the spans; no exporter of other signals
  Telemetry telemetry = setup_telemetry(config, std::move(options));
  const std::int64_t ints[] = {1, -2, 3};
  const double doubles[] = {0.5, 1e300};
  const bool bools[] = {true, false};
  const std::string_view names[] = {"a", "", "é"};
  SpanContext remote;
  remote.trace_id.bytes[15] = 7;
  remote.span_id.bytes[7] = 9;
  remote.trace_flags = 1;
  remote.is_remote = true;
  {
    Span parent(mg::job, "parent", {{"n", std::int64_t{9007199254740993}}, {"x", 2.5}, {"ok", true}, {"s", "text"}});
    {
      Span child(mg::step, "child",
                 {{"ints", std::span<const std::int64_t>(ints)},
                  {"doubles", std::span<const double>(doubles)},
                  {"bools", std::span<const bool>(bools)},
                  {"names", std::span<const std::string_view>(names)}},
                 {.kind = SpanKind::kClient});
      child.add_event("loaded", {{"bytes", 7}});
      child.add_link(remote, {{"why", "input"}});
      child.set_status(StatusCode::kError, "bad input");
    }
  }
  Span open(mg::job, "still.open");
  telemetry.shutdown();
  ASSERT_EQ(read.size(), 3U);
  ASSERT_EQ(read.size(), encoded.size());
  for (std::size_t i = 0; i < read.size(); ++i) EXPECT_EQ(read[i], encoded[i]) << read[i].dump(2) << encoded[i].dump(2);
  EXPECT_EQ(read[2]["attributes"].back()["key"], "nemo.span.truncated");
  EXPECT_EQ(read[2]["events"][0]["name"], "nemo.span.truncated");
}

}  // namespace
}  // namespace lens
