// The console and file exporters' output, read back with a JSON parser and checked field by field against the
// OTLP/JSON rules: hex ids, 64-bit integers as decimal strings, enums as integers, lowerCamelCase keys,
// resource and scope filled.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "export/exporters.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::attribute;
using testing::json;

// Checks one ExportTraceServiceRequest the way a strict OTLP/JSON reader would.
void check_request(const json& request) {
  static const std::regex hex32("^[0-9a-f]{32}$"), hex16("^[0-9a-f]{16}$"), decimal("^[0-9]+$");
  ASSERT_TRUE(request.contains("resourceSpans"));
  for (const json& rs : request["resourceSpans"]) {
    EXPECT_EQ(attribute(rs["resource"], "service.name")["stringValue"], "otlp-json-test");
    EXPECT_EQ(attribute(rs["resource"], "telemetry.sdk.name")["stringValue"], "lens");
    EXPECT_EQ(attribute(rs["resource"], "dl.rank")["intValue"], "0");  // int64 as a string
    EXPECT_EQ(attribute(rs["resource"], "dl.world_size")["intValue"], "1");
    for (const json& ss : rs["scopeSpans"]) {
      EXPECT_EQ(ss["scope"]["name"], "lens");
      EXPECT_TRUE(ss["scope"]["version"].is_string());
      for (const json& s : ss["spans"]) {
        for (auto it = s.begin(); it != s.end(); ++it) {
          static const std::regex camel("^[a-z][a-zA-Z]*$");
          EXPECT_TRUE(std::regex_match(it.key(), camel)) << it.key();
        }
        EXPECT_TRUE(std::regex_match(s["traceId"].get<std::string>(), hex32));
        EXPECT_TRUE(std::regex_match(s["spanId"].get<std::string>(), hex16));
        if (s.contains("parentSpanId")) EXPECT_TRUE(std::regex_match(s["parentSpanId"].get<std::string>(), hex16));
        EXPECT_TRUE(s["kind"].is_number_integer());
        EXPECT_TRUE(s["flags"].is_number_integer());
        EXPECT_TRUE(std::regex_match(s["startTimeUnixNano"].get<std::string>(), decimal));
        EXPECT_TRUE(std::regex_match(s["endTimeUnixNano"].get<std::string>(), decimal));
        EXPECT_LE(std::stoull(s["startTimeUnixNano"].get<std::string>()),
                  std::stoull(s["endTimeUnixNano"].get<std::string>()));
        EXPECT_TRUE(s["status"].is_object());
        if (s["status"].contains("code")) EXPECT_TRUE(s["status"]["code"].is_number_integer());
      }
    }
  }
}

Config exporter_config(Exporter exporter, const std::string& dir) {
  Config c = testing::capture_config();
  c.service_name = "otlp-json-test";
  c.exporter = exporter;
  c.file_dir = dir;
  c.run_id = "json-run";
  return c;
}

void record_some_spans() {
  LENS_SPAN(mg::job, "request.root", {"n", std::int64_t{9007199254740993}}, {"text", "tab\there \"quoted\" \xff"});
  LENS_SPAN_NAMED(s, mg::step, "request.child", {"ratio", 0.25});
  s.add_event("e", {{"k", true}});
  s.set_status(StatusCode::kError, "bad");
}

TEST(OtlpJson, FileExporterWritesWholeLinesOfValidRequests) {
  std::string dir = ::testing::TempDir() + "lens-otlp-json-" + std::to_string(::getpid());
  Telemetry t = setup_telemetry(exporter_config(Exporter::kFile, dir), 0, 1, {}, SetupOptions{.reinit = true});
  record_some_spans();
  ASSERT_TRUE(t.force_flush());
  record_some_spans();
  ASSERT_TRUE(t.shutdown());

  std::ifstream in(dir + "/json-run/rank0.traces.jsonl");
  ASSERT_TRUE(in.good());
  std::string line;
  int lines = 0, spans = 0;
  while (std::getline(in, line)) {
    json request = json::parse(line);  // throws on a torn or invalid line
    check_request(request);
    spans += static_cast<int>(request["resourceSpans"][0]["scopeSpans"][0]["spans"].size());
    ++lines;
  }
  EXPECT_EQ(lines, 2);  // one request per export
  EXPECT_EQ(spans, 4);
}

TEST(OtlpJson, ValuesFollowTheRules) {
  testing::Capture c(exporter_config(Exporter::kConsole, ""));
  record_some_spans();
  json root = c.span("request.root");
  EXPECT_EQ(attribute(root, "n")["intValue"], "9007199254740993");  // exact, beyond a double's precision
  // Control characters escaped, quotes escaped, invalid UTF-8 replaced: the line still parses.
  EXPECT_EQ(attribute(root, "text")["stringValue"], "tab\there \"quoted\" \xEF\xBF\xBD");
  json child = c.span("request.child");
  EXPECT_EQ(attribute(child, "ratio")["doubleValue"], 0.25);
  EXPECT_EQ(child["status"]["code"], 2);
  EXPECT_EQ(child["kind"], 1);
  EXPECT_EQ(child["flags"].get<int>() & 0x1, 1);
  EXPECT_EQ(child["flags"].get<int>() & 0x100, 0x100);  // remoteness of the parent known: local
  check_request(c.requests().front());
}

TEST(OtlpJson, ConsoleExporterWritesOneRequestPerLineOnStdout) {
  ::testing::internal::CaptureStdout();
  {
    Telemetry t = setup_telemetry(exporter_config(Exporter::kConsole, ""), 0, 1, {}, SetupOptions{.reinit = true});
    record_some_spans();
    t.shutdown();
  }
  std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  std::istringstream lines(out);
  std::string line;
  int traces = 0, metrics = 0;
  while (std::getline(lines, line)) {
    json request = json::parse(line);  // every line a whole request
    if (request.contains("resourceSpans")) {
      check_request(request);
      ++traces;
    }
    metrics += request.contains("resourceMetrics");
  }
  EXPECT_EQ(traces, 1);
  EXPECT_EQ(metrics, 1);  // collected once more at shutdown
}

}  // namespace
}  // namespace lens
