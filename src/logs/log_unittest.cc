// Log records: correlation with the active span, the spdlog sink, drops under a flood, and nothing at all
// where logs are off.
#include "lens/log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <vector>

#include "lens/spdlog_sink.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::attribute;
using testing::json;

Config logs_config() {
  Config c = testing::capture_config("all");
  c.logs_enabled = true;
  c.log_batch.schedule_delay_ms = 60000;
  return c;
}

std::vector<json> log_records(testing::Capture& c) {
  c.telemetry().force_flush();
  std::vector<json> out;
  std::lock_guard lock(c.exporter().mutex);
  for (const std::string& r : c.exporter().logs) {
    json request = json::parse(r);
    for (const json& rl : request["resourceLogs"])
      for (const json& sl : rl["scopeLogs"])
        for (const json& record : sl["logRecords"]) out.push_back(record);
  }
  return out;
}

TEST(Logs, CarryTheActiveSpansIds) {
  testing::Capture c(logs_config());
  {
    LENS_SPAN(mg::step, "step");
    log(Severity::kWarn, "inside", {{"megatron.iteration", 7}});
  }
  log(Severity::kInfo, "outside");
  std::vector<json> records = log_records(c);
  ASSERT_EQ(records.size(), 2u);
  json step = c.span("step");
  EXPECT_EQ(records[0]["body"]["stringValue"], "inside");
  EXPECT_EQ(records[0]["severityNumber"], 13);
  EXPECT_EQ(records[0]["severityText"], "WARN");
  EXPECT_EQ(records[0]["traceId"], step["traceId"]);
  EXPECT_EQ(records[0]["spanId"], step["spanId"]);
  EXPECT_EQ(attribute(records[0], "megatron.iteration")["intValue"], "7");
  EXPECT_FALSE(records[1].contains("traceId"));
  EXPECT_TRUE(records[1]["timeUnixNano"].is_string());
}

TEST(Logs, SpdlogSinkMapsLevelsAndCorrelates) {
  testing::Capture c(logs_config());
  auto logger = std::make_shared<spdlog::logger>("trainer", std::make_shared<SpdlogSink>());
  logger->set_level(spdlog::level::trace);
  {
    LENS_SPAN(mg::checkpoint, "save");
    logger->error("disk {} is full", "/ckpt");
  }
  logger->debug("debug line");
  std::vector<json> records = log_records(c);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["body"]["stringValue"], "disk /ckpt is full");
  EXPECT_EQ(records[0]["severityNumber"], 17);
  EXPECT_EQ(records[0]["spanId"], c.span("save")["spanId"]);
  EXPECT_EQ(attribute(records[0], "logger.name")["stringValue"], "trainer");
  EXPECT_EQ(records[1]["severityNumber"], 5);
}

TEST(Logs, AFloodIsBoundedAndEveryDropCounted) {
  Config config = logs_config();
  config.log_batch.max_queue_size = 100;
  config.log_batch.max_export_batch_size = 100;
  testing::Capture c(config);
  c.exporter().hang = true;
  for (int i = 0; i < 5000; ++i) log(Severity::kInfo, "flood");
  c.exporter().release();
  ASSERT_TRUE(c.telemetry().shutdown());
  LogStats s = c.telemetry().log_stats();
  EXPECT_EQ(s.produced, 5000u);
  EXPECT_GT(s.dropped_queue_full, 0u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

// should_log answers for the severity it is given.
TEST(Logs, ShouldLogHonoursTheMinimumSeverity) {
  Config config = logs_config();
  config.min_log_severity = Severity::kWarn;
  testing::Capture c(config);
  EXPECT_FALSE(should_log(Severity::kInfo));
  EXPECT_TRUE(should_log(Severity::kWarn));
  EXPECT_TRUE(should_log(Severity::kFatal));
  log(Severity::kInfo, "below");
  log(Severity::kError, "above");
  std::vector<json> records = log_records(c);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["body"]["stringValue"], "above");
}

TEST(Logs, NothingWhenLogsAreOff) {
  testing::Capture c(testing::capture_config("all"));  // LOGS_ENABLED defaults to 0
  EXPECT_FALSE(should_log(Severity::kFatal));
  log(Severity::kFatal, "dropped silently: logs are off");
  EXPECT_TRUE(log_records(c).empty());
  EXPECT_EQ(c.telemetry().log_stats().produced, 0u);
}

}  // namespace
}  // namespace lens
