// OTLP over HTTP against a small collector of the test's own (cpp-httplib on loopback, bounded, stopped at the
// end): what arrives, headers, gzip, the endpoint rules, retries (503 with Retry-After, 429), no retry on 400,
// partial success, an absent collector and one that never answers (shutdown still meets its deadline).
#include "export/otlp_http.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "support/capture.h"
#include "support/otlp_config.h"
#include "support/test_collector.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using std::chrono::milliseconds;
using testing::json;

std::string gunzip(const std::string& in) {
  z_stream z{};
  inflateInit2(&z, 15 + 16);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  inflate(&z, Z_FINISH);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

using testing::TestCollector;

Config http_config(int port, OtlpProtocol protocol = OtlpProtocol::kHttpJson) {
  return testing::otlp_test_config(protocol, "http://127.0.0.1:" + std::to_string(port));
}

std::size_t spans_in(const json& request) {
  std::size_t n = 0;
  for (const json& rs : request["resourceSpans"])
    for (const json& ss : rs["scopeSpans"]) n += ss["spans"].size();
  return n;
}

TEST(OtlpHttp, EndpointRules) {
  OtlpSignalConfig s;
  EXPECT_EQ(internal::otlp_http_url(s, "v1/traces"), "http://localhost:4318/v1/traces");
  s.endpoint = "https://collector:4318";
  EXPECT_EQ(internal::otlp_http_url(s, "v1/metrics"), "https://collector:4318/v1/metrics");
  s.endpoint = "https://collector:4318/base/";
  EXPECT_EQ(internal::otlp_http_url(s, "v1/logs"), "https://collector:4318/base/v1/logs");
  s.endpoint = "https://collector/custom/path";
  s.endpoint_is_per_signal = true;
  EXPECT_EQ(internal::otlp_http_url(s, "v1/traces"), "https://collector/custom/path");
}

TEST(OtlpHttp, JsonArrivesWithHeadersAndUserAgent) {
  TestCollector collector([](auto&, auto& response, int) { response.set_content("{}", "application/json"); });
  Config c = http_config(collector.port());
  c.otlp_traces.headers = {{"Authorization", "Bearer s3cret-token"}};
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "over-http", {"k", 1}); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("s3cret-token"), std::string::npos) << log;  // header values are never logged
  std::vector<httplib::Request> received = collector.received();
  ASSERT_EQ(received.size(), 1u);
  const httplib::Request& r = received[0];
  EXPECT_EQ(r.path, "/v1/traces");
  EXPECT_EQ(r.get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(r.get_header_value("Authorization"), "Bearer s3cret-token");
  EXPECT_NE(r.get_header_value("User-Agent").find("lens/"), std::string::npos);
  json request = json::parse(r.body);
  EXPECT_EQ(spans_in(request), 1u);
  EXPECT_EQ(request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"], "over-http");
  EXPECT_EQ(t.span_stats().exported, 1u);
}

TEST(OtlpHttp, ProtobufWithGzip) {
  TestCollector collector([](auto&, auto& response, int) { response.set_content("", "application/x-protobuf"); });
  Config c = http_config(collector.port(), OtlpProtocol::kHttpProtobuf);
  c.otlp_traces.compression = Compression::kGzip;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "zipped"); }
  ASSERT_TRUE(t.shutdown());
  std::vector<httplib::Request> received = collector.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].get_header_value("Content-Type"), "application/x-protobuf");
  EXPECT_EQ(received[0].get_header_value("Content-Encoding"), "gzip");
  std::string proto = received[0].body;
  if (received[0].get_header_value("Content-Encoding") == "gzip" && proto.size() > 2 &&
      static_cast<unsigned char>(proto[0]) == 0x1f)
    proto = gunzip(proto);  // cpp-httplib may have inflated it already
  EXPECT_NE(proto.find("zipped"), std::string::npos);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

TEST(OtlpHttp, RetriesOn503HonouringRetryAfterAndOn429) {
  TestCollector collector([](auto&, auto& response, int attempt) {
    if (attempt == 1) {
      response.status = 503;
      response.set_header("Retry-After", "1");
    } else if (attempt == 2) {
      response.status = 429;
    } else {
      response.set_content("{}", "application/json");
    }
  });
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "retried"); }
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1000));  // waited as Retry-After said
  EXPECT_EQ(collector.requests(), 3);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

TEST(OtlpHttp, NoRetryOn400AndTheBatchIsCounted) {
  TestCollector collector([](auto&, auto& response, int) { response.status = 400; });
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "refused"); }
  ASSERT_TRUE(t.shutdown());
  EXPECT_EQ(collector.requests(), 1);
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpHttp, PartialSuccessIsNotRetriedAndIsLoggedOnce) {
  TestCollector collector([](auto&, auto& response, int) {
    response.set_content(R"({"partialSuccess":{"rejectedSpans":"1","errorMessage":"span too old"}})",
                         "application/json");
  });
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "a"); }
  ASSERT_TRUE(t.force_flush());
  { LENS_SPAN(mg::job, "b"); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.requests(), 2);  // one per batch: never retried
  std::size_t first = log.find("span too old");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("span too old", first + 1), std::string::npos) << log;  // once per distinct message
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.rejected_by_collector, 2u);  // delivered, refused by the collector: counted apart
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpHttp, ProtobufPartialSuccessCountsTheRejectedItems) {
  TestCollector collector([](auto&, auto& response, int) {
    // ExportTraceServiceResponse { partial_success (1) { rejected_spans (1) = 1, error_message (2) = "quota" } }
    static const std::string body = std::string("\x0a\x09\x08\x01\x12\x05quota", 11);
    response.set_content(body, "application/x-protobuf");
  });
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(http_config(collector.port(), OtlpProtocol::kHttpProtobuf),
                                {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "kept"); }
  { LENS_SPAN(mg::job, "rejected"); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rejected 1 of 2 items: quota"), std::string::npos) << log;
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.exported, 1u);
  EXPECT_EQ(s.rejected_by_collector, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpHttp, ARefusalIsLoggedWithTheCollectorsMessageAtABoundedRate) {
  TestCollector collector([](auto&, auto& response, int) {
    response.status = 400;
    response.set_content(R"({"code":3,"message":"span name is empty"})", "application/json");
  });
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  for (int i = 0; i < 5; ++i) {
    { LENS_SPAN(mg::job, "refused"); }
    t.force_flush();
  }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.requests(), 5);
  std::size_t first = log.find("HTTP 400: span name is empty");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("HTTP 400", first + 1), std::string::npos) << log;  // not once per batch
  EXPECT_EQ(t.span_stats().dropped_export_failed, 5u);
}

TEST(OtlpHttp, ACollectorThatDiesAndComesBackGetsTheDataAfterItReturns) {
  auto ok = [](auto&, auto& response, int) { response.set_content("{}", "application/json"); };
  auto first = std::make_unique<TestCollector>(ok);
  const int port = first->port();
  Config c = http_config(port);
  c.otlp_traces.timeout_ms = 300;
  c.span_batch.export_timeout_ms = 800;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "before"); }
  ASSERT_TRUE(t.force_flush());
  EXPECT_EQ(first->requests(), 1);
  first.reset();  // the collector dies
  { LENS_SPAN(mg::job, "while-down"); }
  t.force_flush();
  EXPECT_EQ(t.span_stats().dropped_export_failed, 1u);  // lost, and counted
  TestCollector second(ok, port);                       // and comes back on the same port
  { LENS_SPAN(mg::job, "after"); }
  ASSERT_TRUE(t.shutdown());
  std::vector<httplib::Request> received = second.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(json::parse(received[0].body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"], "after");
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.exported, 2u);
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

// The collector holds every request until the training loop is done: if recording a span ever waited for the
// network, the loop would never finish (and this test would time out). The overflow is dropped and counted.
TEST(OtlpHttp, ASlowCollectorFillsTheQueueButNeverHoldsTheTrainingThread) {
  std::atomic<bool> training_done{false};
  TestCollector collector([&](auto&, auto& response, int) {
    for (int i = 0; i < 600 && !training_done.load(); ++i) std::this_thread::sleep_for(milliseconds(10));  // bounded
    response.set_content("{}", "application/json");
  });
  Config c = http_config(collector.port());
  c.span_batch.max_queue_size = 256;
  c.span_batch.max_export_batch_size = 64;
  c.span_batch.schedule_delay_ms = 1;
  c.otlp_traces.timeout_ms = 10000;
  c.span_batch.export_timeout_ms = 10000;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  for (int i = 0; i < 20000; ++i) {
    LENS_SPAN(mg::job, "step", {"i", i});
  }
  training_done.store(true);
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.produced, 20000u);
  EXPECT_GT(s.dropped_queue_full, 10000u);
  EXPECT_GT(s.exported, 0u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpHttp, AnAbsentCollectorCostsCountedDropsNotAHang) {
  int port;
  {
    TestCollector gone([](auto&, auto&, int) {});
    port = gone.port();
  }  // a port nobody listens on now
  Config c = http_config(port);
  c.span_batch.export_timeout_ms = 1500;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "lost"); }
  auto start = std::chrono::steady_clock::now();
  t.shutdown(std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpHttp, ACollectorThatNeverAnswersCannotHoldShutdown) {
  std::atomic<bool> release{false};
  TestCollector collector([&](auto&, auto& response, int) {
    for (int i = 0; i < 100 && !release.load(); ++i) std::this_thread::sleep_for(milliseconds(50));  // bounded
    response.set_content("{}", "application/json");
  });
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "stuck"); }
  auto start = std::chrono::steady_clock::now();
  t.shutdown(milliseconds(500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  release.store(true);
}

}  // namespace
}  // namespace lens
