#include "report.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace lens_tools {
namespace {

std::vector<int> ranks_of(const std::vector<StepRecord>& records) {
  std::vector<int> ranks;
  ranks.reserve(records.size());
  for (const StepRecord& r : records) ranks.push_back(r.rank);
  return ranks;
}

TEST(RecordsByIteration, KeepsAnIterationsRecordsInRankOrderWhateverOrderTheyCameIn) {
  RecordsByIteration<StepRecord> records;
  for (int rank : {3, 0, 7, 1, 3}) records.at(5, rank).step_ns += 10;
  ASSERT_EQ(records.begin()->first, 5);
  EXPECT_EQ(ranks_of(records.begin()->second), (std::vector<int>{0, 1, 3, 7}));
  ASSERT_NE(records.find(5, 3), nullptr);
  EXPECT_EQ(records.find(5, 3)->step_ns, 20u);  // the same record both times
  EXPECT_EQ(records.find(5, 2), nullptr);
  EXPECT_EQ(records.find(6, 3), nullptr);
}

TEST(RecordsByIteration, AMergeAddsTheLaterFilesRecordsAsOneReportWould) {
  RecordsByIteration<StepRecord> earlier, later;
  earlier.at(1, 0).phase_ns[kForward] = 5;
  earlier.at(1, 2).step_ns = 100;
  StepRecord& again = later.at(1, 2);  // the same rank and iteration, from a later file of the process
  again.step_ns = 120;
  again.phase_ns[kForward] = 7;
  again.microbatches = 4;
  later.at(1, 1).step_ns = 90;
  later.at(2, 0).step_ns = 80;  // an iteration only the later files have
  earlier.merge(std::move(later));
  EXPECT_TRUE(later.empty());  // NOLINT(bugprone-use-after-move): a merge leaves it empty, and says so
  EXPECT_EQ(ranks_of(earlier.begin()->second), (std::vector<int>{0, 1, 2}));
  const StepRecord* merged = earlier.find(1, 2);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->step_ns, 120u);  // a step read later replaces
  EXPECT_EQ(merged->phase_ns[kForward], 7u);
  EXPECT_EQ(merged->microbatches, 4);
  ASSERT_NE(earlier.find(2, 0), nullptr);
  EXPECT_EQ(earlier.find(2, 0)->step_ns, 80u);
}

SpanRow span_of(const Origin& origin, const char* name, std::uint64_t start, std::uint64_t end) {
  SpanRow row;
  row.origin = &origin;
  row.name = name;
  row.start_ns = start;
  row.end_ns = end;
  return row;
}

TEST(Report, AMicroBatchCountPastAnIntIsHeldAtTheLargestInt) {
  Origin origin;
  origin.run_id = "run";
  origin.rank = 0;
  origin.world_size = 1;
  Report report;
  SpanRow forward_backward = span_of(origin, "megatron.forward_backward", 1100, 1900);
  forward_backward.num_microbatches = std::int64_t{1} << 40;  // a file's claim, not a real count
  report.span(forward_backward);
  report.span(span_of(origin, "megatron.microbatch.forward", 1200, 1300));
  report.span(span_of(origin, "megatron.microbatch.backward", 1300, 1500));
  SpanRow step = span_of(origin, "megatron.train_step", 1000, 2000);
  step.iteration = 1;
  report.span(step);
  const Figures figures = report.figures(ReadStats{});
  ASSERT_EQ(figures.bubble.size(), 1u);
  ASSERT_TRUE(figures.bubble[0].microbatches.has_value());
  EXPECT_EQ(*figures.bubble[0].microbatches, 2147483647.0);
}

}  // namespace
}  // namespace lens_tools
