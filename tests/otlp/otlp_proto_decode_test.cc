// lens's OTLP protobuf bytes, decoded by an independent decoder (protobufjs with the official OpenTelemetry
// .proto files, tests/peers) and compared field by field with what lens meant to send: the same batch in
// OTLP/JSON. The corpus covers every attribute type and the edge cases: empty strings, unicode, negative ints,
// NaN and infinities, arrays, long strings, events, links, status, every metric kind, log records, and an
// empty batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <string_view>
#include <vector>

#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#include "lens/log.h"
#include "lens/metrics.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::json;

// What protobufjs makes of `bytes` (a serialized request of `signal`), in OTLP/JSON form.
json decode_with_protobufjs(const std::string& signal, const std::string& bytes) {
  std::string file = ::testing::TempDir() + "lens-otlp-" + std::to_string(::getpid()) + "-" + signal + ".bin";
  std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::string command = "node " LENS_PEERS_DIR "/decode_otlp.js " + signal + " " + file;
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[65536];
  std::size_t n;
  while (pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int status = pipe ? ::pclose(pipe) : -1;
  EXPECT_EQ(status, 0) << "decoder failed; are the npm peers installed (scripts/setup-deps.sh)?";
  return out.empty() ? json() : json::parse(out);
}

void expect_same(const std::string& signal, const std::string& proto, const std::string& json_text) {
  json decoded = decode_with_protobufjs(signal, proto);
  json meant = json::parse(json_text);
  EXPECT_EQ(decoded, meant) << "protobufjs: " << decoded.dump() << "\nlens meant: " << meant.dump();
}

TEST(OtlpProto, SpansDecodeToWhatLensMeant) {
  Config config = testing::capture_config();
  testing::Capture c(config, {{"consumer.key", std::string("ünïcødé ✓")}, {"consumer.int", std::int64_t{-42}}});
  SpanContext linked = *from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  {
    const std::int64_t ints[] = {-1, 0, std::numeric_limits<std::int64_t>::max(),
                                 std::numeric_limits<std::int64_t>::min()};
    const double reals[] = {0.1, -2.5e300, std::numeric_limits<double>::infinity(), std::nan("")};
    const bool flags[] = {true, false, true};
    const std::string_view words[] = {"", "日本語", "a\"b\\c"};
    std::string long_text(1500, 'x');
    LENS_SPAN_NAMED(root, mg::job, "root ✓", {"empty", ""}, {"negative", std::int64_t{-123456789012}},
                    {"nan", std::nan("")}, {"inf", -std::numeric_limits<double>::infinity()}, {"t", true});
    root.set_attributes({{"ints", std::span<const std::int64_t>(ints)},
                         {"reals", std::span<const double>(reals)},
                         {"flags", std::span<const bool>(flags)},
                         {"words", std::span<const std::string_view>(words)},
                         {"long", long_text}});
    root.add_event("event", {{"k", 1}});
    root.add_link(linked, {{"why", "previous segment"}});
    root.set_status(StatusCode::kError, "boom");
    LENS_SPAN(mg::step, "child", {"i", 0});
  }
  ASSERT_TRUE(c.telemetry().force_flush());
  std::lock_guard lock(c.exporter().mutex);
  ASSERT_EQ(c.exporter().span_protos.size(), c.exporter().requests.size());
  ASSERT_FALSE(c.exporter().span_protos.empty());
  for (std::size_t i = 0; i < c.exporter().span_protos.size(); ++i)
    expect_same("traces", c.exporter().span_protos[i], c.exporter().requests[i]);
}

TEST(OtlpProto, MetricsAndLogsDecodeToWhatLensMeant) {
  Config config = testing::capture_config();
  config.logs_enabled = true;
  testing::Capture c(config);
  metrics::counter<std::int64_t>("proto.counter", {.description = "Items.", .unit = "{item}"}).add(7);
  metrics::up_down_counter<double>("proto.updown").add(-2.5, {{"where", "here"}});
  metrics::gauge<double>("proto.gauge", {.unit = "1"}).record(0.75);
  const double bounds[] = {1, 10};
  metrics::histogram<double>("proto.histogram", {.unit = "ms", .bounds = bounds}).record(5);
  {
    LENS_SPAN(mg::job, "with-log");
    log(Severity::kError, "日本語 body", {{"n", -1}});
  }
  log(Severity::kInfo, "");
  ASSERT_TRUE(c.telemetry().force_flush());
  std::lock_guard lock(c.exporter().mutex);
  ASSERT_FALSE(c.exporter().metric_protos.empty());
  expect_same("metrics", c.exporter().metric_protos.back(), c.exporter().metrics.back());
  ASSERT_FALSE(c.exporter().log_protos.empty());
  expect_same("logs", c.exporter().log_protos.back(), c.exporter().logs.back());
}

TEST(OtlpProto, AnEmptyBatchAndAHugeOne) {
  internal::Resource resource{{{"service.name", std::string("svc")}}};
  internal::TimeMap time;
  std::vector<const std::uint8_t*> none;
  std::string text;
  internal::WireBuffer wire;
  internal::encode_traces_proto(internal::ExportBatch{resource, none, time}, wire);
  std::string proto(wire.view());
  internal::encode_traces_json(internal::ExportBatch{resource, none, time}, text);
  json meant = json::parse(text);
  json& scope_spans = meant["resourceSpans"][0]["scopeSpans"][0];
  EXPECT_TRUE(scope_spans["spans"].empty());
  scope_spans.erase("spans");  // an empty repeated field: `[]` in JSON, absent in protobuf, the same message
  EXPECT_EQ(decode_with_protobufjs("traces", proto), meant);
  // A batch above the padded-length threshold of the writer's outer messages.
  testing::Capture c;
  for (int i = 0; i < 300; ++i) {
    LENS_SPAN(mg::job, "many", {"i", i}, {"text", "some words to make the batch larger than four kilobytes"});
  }
  ASSERT_TRUE(c.telemetry().force_flush());
  std::lock_guard lock(c.exporter().mutex);
  ASSERT_GT(c.exporter().span_protos.front().size(), 4096u);
  expect_same("traces", c.exporter().span_protos.front(), c.exporter().requests.front());
}

}  // namespace
}  // namespace lens
