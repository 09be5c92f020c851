// lens against a real OTLP receiver: @elastic/mockotlpserver (npm, pinned in tests/peers), which listens on
// 127.0.0.1:4317 (gRPC) and 4318 (HTTP) and prints each request it decoded as one JSON line. For each protocol
// (grpc, http/protobuf, http/json) lens exports traces, metrics and logs, and the test checks what the receiver
// decoded: names, ids, parentage, attributes of every type, events, links, status, kind, resource, scope, metric
// points and log records. The ports are fixed, so ctest runs these alone (RESOURCE_LOCK mockotlpserver).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "export/otlp_exporter.h"
#include "lens/lens.h"
#include "support/mock_otlp_server.h"
#include "support/otlp_config.h"

namespace lens {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
namespace mg = megatron::group;

// The receiver, started once for the suite; its stdout goes to a file the tests read.
class Receiver {
 public:
  Receiver() : output_(::testing::TempDir() + "mockotlpserver.out"), server_(output_) {}
  bool ready() const { return server_.ready(); }
  // The requests the receiver printed (its own log lines left out), waiting up to 10 s for `until` to hold.
  std::vector<json> requests(const std::function<bool(const std::vector<json>&)>& until) const {
    std::vector<json> out;
    for (int i = 0; i < 200; ++i) {
      out.clear();
      std::ifstream in(output_);
      for (std::string line; std::getline(in, line);) {
        json j = json::parse(line, nullptr, false);
        if (j.is_object() && !j.contains("msg")) out.push_back(std::move(j));
      }
      if (until(out)) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return out;
  }

 private:
  std::string output_;
  testing::MockOtlpServer server_;
};

Receiver* receiver = nullptr;

class MockReceiver : public ::testing::TestWithParam<OtlpProtocol> {
 protected:
  static void SetUpTestSuite() { receiver = new Receiver(); }
  static void TearDownTestSuite() {
    delete receiver;
    receiver = nullptr;
  }
  void SetUp() override {
    if (GetParam() == OtlpProtocol::kGrpc && !internal::otlp_grpc_available()) GTEST_SKIP() << "built without gRPC";
    ASSERT_TRUE(receiver->ready()) << "mockotlpserver did not start (is tests/peers installed?)";
  }

  // A service name of its own per test, to find its requests among the others'.
  std::string service() const {
    return std::string("lens-mock-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  Config config() const {
    const bool grpc = GetParam() == OtlpProtocol::kGrpc;
    Config c = testing::otlp_test_config(GetParam(), grpc ? "http://127.0.0.1:4317" : "http://127.0.0.1:4318");
    c.metrics_enabled = true;
    c.logs_enabled = true;
    c.service_name = service();
    c.run_id = "mock-run";
    return c;
  }
  // The items under `resource<Kind>` of this test's requests, with their resource and scope.
  std::vector<json> mine(const std::vector<json>& requests, const char* resource_key) const {
    std::vector<json> out;
    for (const json& r : requests) {
      if (!r.contains(resource_key)) continue;
      for (const json& rs : r[resource_key])
        if (rs["resource"]["attributes"].value("service.name", "") == service()) out.push_back(rs);
    }
    return out;
  }
};

std::vector<json> items_of(const std::vector<json>& resource_items, const char* scope_key, const char* key) {
  std::vector<json> out;
  for (const json& rs : resource_items)
    for (const json& ss : rs[scope_key])
      for (const json& item : ss[key]) out.push_back(item);
  return out;
}

// An int64 as the receiver printed it: a number (HTTP), a string, or a protobufjs Long {low, high} (gRPC).
std::int64_t as_int(const json& v) {
  if (v.is_number()) return v.get<std::int64_t>();
  if (v.is_string()) return std::stoll(v.get<std::string>());
  if (v.is_object()) {
    auto word = [&](const char* k) { return static_cast<std::uint64_t>(v[k].get<std::int64_t>()) & 0xffffffffu; };
    return static_cast<std::int64_t>((word("high") << 32) | word("low"));
  }
  ADD_FAILURE() << "not an integer: " << v.dump();
  return 0;
}

json as_ints(const json& array) {
  json out = json::array();
  for (const json& v : array) out.push_back(as_int(v));
  return out;
}

const json* named(const std::vector<json>& items, const std::string& name) {
  for (const json& item : items)
    if (item.value("name", "") == name) return &item;
  return nullptr;
}

TEST_P(MockReceiver, TracesArriveWhole) {
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  SpanContext linked;
  {
    LENS_SPAN_NAMED(from, mg::job, "linked-from");
    linked = from.context();
  }
  {
    LENS_SPAN_NAMED(step, mg::job, "step", {"s", "text ünïcode"}, {"i", std::int64_t{-42}}, {"d", 2.5}, {"b", true});
    static const std::int64_t ints[] = {1, -2, 3};
    static const double doubles[] = {0.5, 1.5};
    step.set_attribute("ints", std::span<const std::int64_t>(ints));
    step.set_attribute("doubles", std::span<const double>(doubles));
    step.add_event("checkpoint", {{"bytes", std::int64_t{1024}}});
    step.add_link(linked, {{"why", "follows"}});
    {
      LENS_SPAN_NAMED(forward, mg::job, "forward");
      forward.set_status(StatusCode::kError, "diverged");
    }
  }
  ASSERT_TRUE(t.shutdown());
  EXPECT_EQ(t.span_stats().exported, 3u);

  std::vector<json> resources;
  receiver->requests([&](const std::vector<json>& r) {
    resources = mine(r, "resourceSpans");
    return items_of(resources, "scopeSpans", "spans").size() >= 3;
  });
  ASSERT_FALSE(resources.empty());
  EXPECT_EQ(resources[0]["resource"]["attributes"].value("nemo.run.id", ""), "mock-run") << resources[0].dump();
  EXPECT_EQ(resources[0]["scopeSpans"][0]["scope"].value("name", ""), "lens");
  std::vector<json> spans = items_of(resources, "scopeSpans", "spans");
  ASSERT_EQ(spans.size(), 3u);
  const json* step = named(spans, "step");
  const json* forward = named(spans, "forward");
  const json* from = named(spans, "linked-from");
  ASSERT_TRUE(step && forward && from);
  EXPECT_EQ((*forward)["traceId"], (*step)["traceId"]);
  EXPECT_EQ((*forward)["parentSpanId"], (*step)["spanId"]);
  EXPECT_EQ((*step)["spanId"].get<std::string>().size(), 16u);
  EXPECT_EQ((*step)["traceId"].get<std::string>().size(), 32u);
  const json& a = (*step)["attributes"];
  EXPECT_EQ(a["s"], "text ünïcode");
  EXPECT_EQ(as_int(a["i"]), -42);
  EXPECT_EQ(a["d"], 2.5);
  EXPECT_EQ(a["b"], true);
  EXPECT_EQ(as_ints(a["ints"]), json::array({1, -2, 3}));
  EXPECT_EQ(a["doubles"], json::array({0.5, 1.5}));
  EXPECT_EQ((*step)["kind"], "SPAN_KIND_INTERNAL");
  ASSERT_EQ((*step)["events"].size(), 1u);
  EXPECT_EQ((*step)["events"][0]["name"], "checkpoint");
  EXPECT_EQ(as_int((*step)["events"][0]["attributes"]["bytes"]), 1024);
  EXPECT_LE(as_int((*step)["startTimeUnixNano"]), as_int((*step)["events"][0]["timeUnixNano"]));
  ASSERT_EQ((*step)["links"].size(), 1u);
  EXPECT_EQ((*step)["links"][0]["spanId"], (*from)["spanId"]);
  EXPECT_EQ((*step)["links"][0]["traceId"], (*from)["traceId"]);
  EXPECT_EQ((*step)["links"][0]["attributes"]["why"], "follows");
  EXPECT_EQ((*forward)["status"]["code"], "STATUS_CODE_ERROR");
  EXPECT_EQ((*forward)["status"]["message"], "diverged");
  EXPECT_LT(as_int((*step)["startTimeUnixNano"]), as_int((*step)["endTimeUnixNano"]));
}

TEST_P(MockReceiver, MetricsArriveWithTheirPoints) {
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  // Instruments live as long as the process: names of this test's own, so earlier tests' values don't add up.
  const std::string prefix = "mock." + std::to_string(static_cast<int>(GetParam())) + ".";
  auto steps = metrics::counter<std::int64_t>(prefix + "steps", {.description = "Steps.", .unit = "{step}"});
  auto step_ms = metrics::histogram<double>(prefix + "step_duration", {.description = "Step time.", .unit = "ms"});
  auto loss = metrics::gauge<double>(prefix + "loss", {.description = "Loss."});
  steps.add(3);
  steps.add(4, {{"phase", "train"}});
  step_ms.record(12.5);
  step_ms.record(40.0);
  loss.record(-1.25);
  ASSERT_TRUE(t.shutdown());

  std::vector<json> metrics;
  receiver->requests([&](const std::vector<json>& r) {
    metrics = items_of(mine(r, "resourceMetrics"), "scopeMetrics", "metrics");
    return named(metrics, prefix + "loss") != nullptr;
  });
  const json* counter = named(metrics, prefix + "steps");
  const json* histogram = named(metrics, prefix + "step_duration");
  const json* gauge = named(metrics, prefix + "loss");
  ASSERT_TRUE(counter && histogram && gauge);
  EXPECT_EQ((*counter)["unit"], "{step}");
  EXPECT_TRUE((*counter)["sum"]["isMonotonic"].get<bool>());
  std::int64_t total = 0;
  for (const json& p : (*counter)["sum"]["dataPoints"]) total += as_int(p["asInt"]);
  EXPECT_EQ(total, 7);
  const json& h = (*histogram)["histogram"]["dataPoints"][0];
  EXPECT_EQ(as_int(h["count"]), 2);
  EXPECT_EQ(h["sum"], 52.5);
  EXPECT_FALSE(h["bucketCounts"].empty());
  EXPECT_EQ((*gauge)["gauge"]["dataPoints"][0]["asDouble"], -1.25);
  EXPECT_NE(named(metrics, "lens.spans.exported"), nullptr);  // lens's own metrics ride along
}

TEST_P(MockReceiver, LogsArriveWithTheirSpan) {
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  std::string span_id;
  {
    LENS_SPAN_NAMED(logging, mg::job, "logging");
    span_id = to_traceparent(logging.context()).substr(36, 16);
    lens::log(Severity::kWarn, "loss spiked", {{"megatron.iteration", std::int64_t{7}}});
  }
  ASSERT_TRUE(t.shutdown());
  EXPECT_EQ(t.log_stats().exported, 1u);

  std::vector<json> logs;
  receiver->requests([&](const std::vector<json>& r) {
    logs = items_of(mine(r, "resourceLogs"), "scopeLogs", "logRecords");
    return !logs.empty();
  });
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0]["body"], "loss spiked");
  EXPECT_EQ(logs[0]["severityText"], "WARN");
  EXPECT_EQ(logs[0]["severityNumber"], 13);
  EXPECT_EQ(logs[0]["spanId"], span_id);
  EXPECT_EQ(as_int(logs[0]["attributes"]["megatron.iteration"]), 7);
}

INSTANTIATE_TEST_SUITE_P(Protocols, MockReceiver,
                         ::testing::Values(OtlpProtocol::kGrpc, OtlpProtocol::kHttpProtobuf, OtlpProtocol::kHttpJson),
                         [](const auto& protocol) {
                           switch (protocol.param) {
                             case OtlpProtocol::kGrpc: return "grpc";
                             case OtlpProtocol::kHttpProtobuf: return "http_protobuf";
                             default: return "http_json";
                           }
                         });

}  // namespace
}  // namespace lens
