// The console and file exporters' output, read back with a JSON parser and checked field by field against the
// OTLP/JSON rules: hex ids, 64-bit integers as decimal strings, enums as integers, lowerCamelCase keys,
// resource and scope filled.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "export/json_lines_exporter.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace fs = std::filesystem;
namespace mg = megatron::group;
using testing::attribute;
using testing::json;

// A directory of the test's own: empty when it starts (the file exporter appends, and a pid comes back across runs:
// a stale file from an earlier run made FileExporterWritesWholeLinesOfValidRequests read 4 lines), gone after it.
class FreshDirectory {
 public:
  explicit FreshDirectory(const std::string& name)
      : path_(::testing::TempDir() + name + "-" + std::to_string(::getpid())) {
    fs::remove_all(path_);
  }
  ~FreshDirectory() { fs::remove_all(path_); }
  FreshDirectory(const FreshDirectory&) = delete;
  FreshDirectory& operator=(const FreshDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
        if (s.contains("parentSpanId")) {
          EXPECT_TRUE(std::regex_match(s["parentSpanId"].get<std::string>(), hex16));
        }
        EXPECT_TRUE(s["kind"].is_number_integer());
        EXPECT_TRUE(s["flags"].is_number_integer());
        EXPECT_TRUE(std::regex_match(s["startTimeUnixNano"].get<std::string>(), decimal));
        EXPECT_TRUE(std::regex_match(s["endTimeUnixNano"].get<std::string>(), decimal));
        EXPECT_LE(std::stoull(s["startTimeUnixNano"].get<std::string>()),
                  std::stoull(s["endTimeUnixNano"].get<std::string>()));
        EXPECT_TRUE(s["status"].is_object());
        if (s["status"].contains("code")) {
          EXPECT_TRUE(s["status"]["code"].is_number_integer());
        }
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
  const FreshDirectory dir("lens-otlp-json");
  Telemetry t =
      setup_telemetry(exporter_config(Exporter::kFile, dir.path()), {.rank = 0, .world_size = 1, .reinit = true});
  record_some_spans();
  ASSERT_TRUE(t.force_flush());
  record_some_spans();
  ASSERT_TRUE(t.shutdown());

  std::ifstream in(dir.path() + "/json-run/rank0.traces.jsonl");
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
    Telemetry t =
        setup_telemetry(exporter_config(Exporter::kConsole, ""), {.rank = 0, .world_size = 1, .reinit = true});
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

namespace lens {
namespace {

// The file exporter's metrics line, field by field: the nine megatron.training.* instruments and lens's own.
TEST(OtlpJsonMetrics, TrainingAndSelfMetricsInTheMetricsFile) {
  const FreshDirectory dir("lens-otlp-metrics");
  Config c = exporter_config(Exporter::kFile, dir.path());
  c.metrics_temporality = Temporality::kDelta;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  megatron::record_training_metrics({.step_duration_ms = 310.0,
                                     .loss = 2.5,
                                     .throughput_tflops = 180.0,
                                     .grad_norm = 1.25,
                                     .skipped_iters = 1,
                                     .learning_rate = 1e-4,
                                     .tokens_per_sec = 52000.0,
                                     .memory_allocated_gb = 61.5,
                                     .mfu = 0.42});
  { LENS_SPAN(mg::job, "one"); }
  ASSERT_TRUE(t.shutdown());
  std::ifstream in(dir.path() + "/json-run/rank0.metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  ASSERT_FALSE(last.empty());
  json request = json::parse(last);
  EXPECT_EQ(attribute(request["resourceMetrics"][0]["resource"], "nemo.run.id")["stringValue"], "json-run");
  std::map<std::string, json> by_name;
  for (const json& m : request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]) by_name[m["name"]] = m;
  const json& step = by_name["megatron.training.step_duration_ms"];
  EXPECT_EQ(step["unit"], "ms");
  EXPECT_EQ(step["description"], "Duration of one training step in milliseconds.");
  ASSERT_TRUE(step.contains("histogram"));
  EXPECT_EQ(step["histogram"]["aggregationTemporality"], 1);    // delta, as asked
  EXPECT_EQ(step["histogram"]["dataPoints"][0]["count"], "1");  // fixed64 as a string
  EXPECT_EQ(step["histogram"]["dataPoints"][0]["bucketCounts"].size(), 16u);
  for (const char* gauge : {"megatron.training.loss", "megatron.training.throughput_tflops",
                            "megatron.training.grad_norm", "megatron.training.learning_rate",
                            "megatron.training.tokens_per_sec", "megatron.training.memory_allocated_gb"}) {
    ASSERT_TRUE(by_name[gauge].contains("gauge")) << gauge;
    EXPECT_FALSE(by_name[gauge].contains("unit")) << gauge;  // only the step duration declares a unit
  }
  EXPECT_EQ(by_name["megatron.training.loss"]["description"], "Training loss value at each log interval.");
  EXPECT_EQ(by_name["megatron.training.mfu"]["unit"], "1");
  EXPECT_EQ(by_name["megatron.training.mfu"]["gauge"]["dataPoints"][0]["asDouble"], 0.42);
  EXPECT_EQ(by_name["megatron.training.loss"]["gauge"]["dataPoints"][0]["asDouble"], 2.5);
  const json& skipped = by_name["megatron.training.skipped_iters"];
  EXPECT_EQ(skipped["sum"]["isMonotonic"], true);
  EXPECT_EQ(skipped["sum"]["dataPoints"][0]["asInt"], "1");
  EXPECT_EQ(by_name["lens.spans.exported"]["sum"]["dataPoints"][0]["asInt"], "1");
  EXPECT_TRUE(by_name.count("lens.spans.dropped"));
  EXPECT_TRUE(by_name.count("lens.export.failures"));
  EXPECT_TRUE(by_name.count("lens.queue.fill"));
}

}  // namespace
}  // namespace lens
