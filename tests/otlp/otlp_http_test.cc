// OTLP over HTTP against a small collector of the test's own (cpp-httplib on loopback, bounded, stopped at the
// end): what arrives, headers, gzip, the endpoint rules, retries (503 with Retry-After, 429), no retry on 400,
// partial success, an absent collector and one that never answers (shutdown still meets its deadline).
#include <gtest/gtest.h>
#include <httplib.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "export/otlp_http.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::json;
using std::chrono::milliseconds;

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

// A collector that answers each request as `respond` says and keeps what it received.
class TestCollector {
 public:
  using Respond = std::function<void(const httplib::Request&, httplib::Response&, int attempt)>;
  explicit TestCollector(Respond respond) : respond_(std::move(respond)) {
    server_.Post(".*", [this](const httplib::Request& request, httplib::Response& response) {
      int attempt = ++requests_;
      {
        std::lock_guard lock(mutex_);
        received_.push_back(request);
      }
      respond_(request, response, attempt);
    });
    server_.set_keep_alive_max_count(1);  // close after each answer: stopping never waits on an idle connection
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~TestCollector() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::vector<httplib::Request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  Respond respond_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::vector<httplib::Request> received_;
};

Config http_config(int port, OtlpProtocol protocol = OtlpProtocol::kHttpJson) {
  Config c = testing::capture_config("job");
  c.exporter = Exporter::kOtlp;
  c.metrics_enabled = false;
  for (OtlpSignalConfig* s : {&c.otlp_traces, &c.otlp_metrics, &c.otlp_logs}) {
    s->protocol = protocol;
    s->endpoint = "http://127.0.0.1:" + std::to_string(port);
    s->timeout_ms = 2000;
  }
  c.span_batch.export_timeout_ms = 4000;
  c.run_id = "http-run";
  return c;
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
  Telemetry t = setup_telemetry(c, 0, 1, {}, SetupOptions{.reinit = true});
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
  Telemetry t = setup_telemetry(c, 0, 1, {}, SetupOptions{.reinit = true});
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
  Telemetry t = setup_telemetry(http_config(collector.port()), 0, 1, {}, SetupOptions{.reinit = true});
  { LENS_SPAN(mg::job, "retried"); }
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1000));  // waited as Retry-After said
  EXPECT_EQ(collector.requests(), 3);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

TEST(OtlpHttp, NoRetryOn400AndTheBatchIsCounted) {
  TestCollector collector([](auto&, auto& response, int) { response.status = 400; });
  Telemetry t = setup_telemetry(http_config(collector.port()), 0, 1, {}, SetupOptions{.reinit = true});
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
  Telemetry t = setup_telemetry(http_config(collector.port()), 0, 1, {}, SetupOptions{.reinit = true});
  { LENS_SPAN(mg::job, "a"); }
  ASSERT_TRUE(t.force_flush());
  { LENS_SPAN(mg::job, "b"); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.requests(), 2);  // one per batch: never retried
  std::size_t first = log.find("span too old");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("span too old", first + 1), std::string::npos) << log;  // once per distinct message
}

TEST(OtlpHttp, AnAbsentCollectorCostsCountedDropsNotAHang) {
  int port;
  { TestCollector gone([](auto&, auto&, int) {}); port = gone.port(); }  // a port nobody listens on now
  Config c = http_config(port);
  c.span_batch.export_timeout_ms = 1500;
  Telemetry t = setup_telemetry(c, 0, 1, {}, SetupOptions{.reinit = true});
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
  Telemetry t = setup_telemetry(http_config(collector.port()), 0, 1, {}, SetupOptions{.reinit = true});
  { LENS_SPAN(mg::job, "stuck"); }
  auto start = std::chrono::steady_clock::now();
  t.shutdown(milliseconds(500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  release.store(true);
}

}  // namespace
}  // namespace lens
