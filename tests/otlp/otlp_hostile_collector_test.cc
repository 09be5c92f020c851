// Collectors that misbehave, and configuration that would let a header escape: none of them may crash a rank,
// hang its export for good, grow its memory without bound, flood the collector, or put a secret or a terminal
// escape into the log. Each collector is a cpp-httplib server on loopback (tests/support/test_collector.h) whose
// answers are bounded in size and time.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "support/otlp_config.h"
#include "support/setup_error.h"
#include "support/test_collector.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using std::chrono::milliseconds;
using testing::TestCollector;

Config http_config(int port, OtlpProtocol protocol = OtlpProtocol::kHttpJson) {
  return testing::otlp_test_config(protocol, "http://127.0.0.1:" + std::to_string(port));
}

void answer_ok(const httplib::Request&, httplib::Response& response, int) {
  response.set_content("{}", "application/json");
}

// CR/LF/NUL in a value would put a forged header or a second request on the wire; a key with a space or a colon
// is no header name. Refused at setup for both HTTP encodings, naming the variable and the entry, never the value.
TEST(HostileInput, HeadersThatWouldSplitARequestAreRefusedAtSetup) {
  TestCollector collector(answer_ok);
  const std::vector<std::pair<std::string, std::string>> bad = {{"authorization", "Bearer TOKEN123\r\nX-Injected: 1"},
                                                                {"authorization", "Bearer TOKEN123\n"},
                                                                {"authorization", std::string("TOKEN123\0x", 10)},
                                                                {"bad key", "TOKEN123"},
                                                                {":authority", "TOKEN123"},
                                                                {"x\r\nInjected", "TOKEN123"}};
  for (OtlpProtocol protocol : {OtlpProtocol::kHttpJson, OtlpProtocol::kHttpProtobuf}) {
    for (const auto& header : bad) {
      Config c = http_config(collector.port(), protocol);
      c.otlp_logs.headers = {header};
      std::string message = testing::setup_error(c);
      EXPECT_NE(message.find("OTEL_EXPORTER_OTLP_LOGS_HEADERS"), std::string::npos) << header.first << ": " << message;
      EXPECT_NE(message.find("entry 1"), std::string::npos) << message;
      EXPECT_EQ(message.find("TOKEN123"), std::string::npos) << message;
    }
  }
  EXPECT_EQ(collector.requests(), 0);  // nothing reached the wire
}

// From the environment too: the percent-decoded %0d%0a of the issue's reproduction is refused the same way.
TEST(HostileInput, PercentEncodedLineBreaksInTheHeadersVariableAreRefused) {
  setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20TOKEN123%0d%0aX-Injected:%201", 1);
  Config c = megatron::config_from_env();
  unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
  TestCollector collector(answer_ok);
  Config wire = http_config(collector.port());
  wire.otlp_traces.headers = c.otlp_traces.headers;
  EXPECT_THROW(setup_telemetry(wire, {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  EXPECT_EQ(collector.requests(), 0);
}

// Retry-After: 18446744074 overflowed the delay and parked the export thread for centuries. Now the hint is
// bounded: past the batch's deadline the batch is dropped and counted, and the next one goes out.
TEST(HostileCollector, AHugeRetryAfterDropsOneBatchAndExportGoesOn) {
  TestCollector collector([](auto&, auto& response, int attempt) {
    if (attempt == 1) {
      response.status = 503;
      response.set_header("Retry-After", "18446744074");
    } else {
      response.set_content("{}", "application/json");
    }
  });
  Config c = http_config(collector.port());
  c.span_batch.export_timeout_ms = 1500;
  SpanStats s = testing::export_two_batches(c).span_stats();
  EXPECT_EQ(collector.requests(), 2);
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported, 1u);
}

// Retry-After: 99999999999999999999 (unreadable as a number) gave 24,270 requests in 3 s, and 0 asks for the
// same. The largest hint gives up at once; a zero hint waits the floor between tries.
TEST(HostileCollector, UnreadableOrZeroRetryAfterIsNotAFlood) {
  for (const char* hint : {"99999999999999999999", "0", "-5", "soon"}) {
    TestCollector collector([&](auto&, auto& response, int) {
      response.status = 503;
      response.set_header("Retry-After", hint);
    });
    Config c = http_config(collector.port());
    c.span_batch.export_timeout_ms = 1000;
    Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
    { LENS_SPAN(mg::job, "refused"); }
    t.shutdown(std::chrono::seconds(3));
    EXPECT_LE(collector.requests(), 1000 / 100 + 1) << "Retry-After: " << hint;
    EXPECT_EQ(t.span_stats().dropped_export_failed, 1u) << "Retry-After: " << hint;
  }
}

// A collector that answers 200 and then streams without end (1 GiB in 11 s grew a rank by as much): lens reads a
// bounded prefix, ends the transfer, and counts the batch by the status it got.
TEST(HostileCollector, AnEndlessResponseBodyIsNotRead) {
  std::atomic<std::size_t> sent{0};
  TestCollector collector([&](auto&, httplib::Response& response, int) {
    response.set_chunked_content_provider("application/json", [&](std::size_t, httplib::DataSink& sink) {
      static const std::string chunk(1 << 20, ' ');
      if (sent.load() > (std::size_t{256} << 20)) return false;  // the test's own bound: 256 MiB
      sent += chunk.size();
      return sink.write(chunk.data(), chunk.size());
    });
  });
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "answered-without-end"); }
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  EXPECT_EQ(t.span_stats().exported, 1u);
  EXPECT_LT(sent.load(), std::size_t{64} << 20) << "lens kept reading";
}

// A collector that answers 200 with garbage for a body (not protobuf, not JSON) in either encoding: the status
// decides, the body is a partial success lens cannot read, and export goes on with every span counted.
TEST(HostileCollector, GarbageInASuccessfulAnswerIsNeitherACrashNorALoss) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 131) & 0xff);
  garbage += "{{{\"partialSuccess\":";
  for (OtlpProtocol protocol : {OtlpProtocol::kHttpProtobuf, OtlpProtocol::kHttpJson}) {
    std::atomic<int> requests{0};
    TestCollector collector([&](auto&, auto& response, int) {
      ++requests;
      response.set_content(garbage,
                           protocol == OtlpProtocol::kHttpJson ? "application/json" : "application/x-protobuf");
    });
    Telemetry t =
        setup_telemetry(http_config(collector.port(), protocol), {.rank = 0, .world_size = 1, .reinit = true});
    for (int batch = 0; batch < 3; ++batch) {
      { LENS_SPAN(mg::job, "answered-with-garbage"); }
      ASSERT_TRUE(t.force_flush());
    }
    ASSERT_TRUE(t.shutdown());
    SpanStats s = t.span_stats();
    EXPECT_EQ(s.produced, 3u);
    EXPECT_EQ(s.exported + s.dropped(), s.produced);
    EXPECT_EQ(s.exported, 3u) << "a 200 is a success whatever its body";
    EXPECT_GE(requests.load(), 3);
  }
}

// A partial success with a negative count was counted as that many rejected items.
TEST(HostileCollector, ANegativeRejectedCountIsNotCounted) {
  TestCollector collector([](auto&, auto& response, int) {
    response.set_content(R"({"partialSuccess":{"rejectedSpans":"-5","errorMessage":"odd"}})", "application/json");
  });
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(http_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "kept"); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.rejected_by_collector, 0u);
  EXPECT_EQ(s.exported, 1u);
  EXPECT_NE(log.find("a negative count"), std::string::npos) << log;
}

// Collector text reaches the log escaped: no terminal escape, no forged log line. Credentials in the endpoint
// (user:token@, ?api_key=) never reach the log or the configuration summary.
TEST(HostileCollector, CollectorTextIsEscapedAndEndpointCredentialsAreRedacted) {
  TestCollector collector([](auto&, auto& response, int) {
    response.status = 400;
    response.set_content("{\"code\":3,\"message\":\"\x1b[2Jbad\r\nlens: forged line\"}", "application/json");
  });
  Config c = http_config(collector.port());
  c.otlp_traces.endpoint =
      "http://lens:PASSWORD1@127.0.0.1:" + std::to_string(collector.port()) + "/v1/traces?key=KEY2";
  c.otlp_traces.endpoint_is_per_signal = true;
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "refused"); }
  t.shutdown();
  std::string log = ::testing::internal::GetCapturedStderr() + c.summary();
  EXPECT_EQ(collector.requests(), 1);
  EXPECT_EQ(log.find("PASSWORD1"), std::string::npos) << log;
  EXPECT_EQ(log.find("KEY2"), std::string::npos) << log;
  EXPECT_NE(log.find("***@127.0.0.1"), std::string::npos) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
  EXPECT_EQ(log.find("\nlens: forged line"), std::string::npos) << log;
}

}  // namespace
}  // namespace lens
