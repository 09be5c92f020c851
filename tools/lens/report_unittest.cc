#include "report.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "span_row_testing.h"

namespace lens_tools {
namespace {

// Each iteration with its ranks, as for_each_iteration hands them: (iteration, rank, step_ns) in order.
std::vector<std::tuple<std::int64_t, int, std::uint64_t>> visited(const RecordsByRank<StepRecord>& records) {
  std::vector<std::tuple<std::int64_t, int, std::uint64_t>> out;
  records.for_each_iteration([&](std::int64_t iteration, const auto& ranked) {
    for (const auto& r : ranked) out.emplace_back(iteration, r.rank, r->step_ns);
  });
  return out;
}

TEST(RecordsByRank, HandsEachIterationsRecordsInRankOrderWhateverOrderTheyCameIn) {
  // A Collector's file: every rank's batches, in any order; a rank's own iterations mostly in order.
  RecordsByRank<StepRecord> records;
  for (auto [iteration, rank] : {std::pair{2, 3}, {1, 7}, {1, 3}, {2, 0}, {1, 0}, {3, 7}, {2, 3}})
    records.at(iteration, rank).step_ns += 10;
  using Row = std::tuple<std::int64_t, int, std::uint64_t>;
  EXPECT_EQ(visited(records),
            (std::vector<Row>{{1, 0, 10}, {1, 3, 10}, {1, 7, 10}, {2, 0, 10}, {2, 3, 20}, {3, 7, 10}}));
  ASSERT_NE(records.find(2, 3), nullptr);
  EXPECT_EQ(records.find(2, 3)->step_ns, 20u);  // the same record both times
  EXPECT_EQ(records.find(2, 7), nullptr);
  EXPECT_EQ(records.find(2, 5), nullptr);
  EXPECT_EQ(records.ranks(), (std::vector<int>{0, 3, 7}));
}

TEST(RecordsByRank, AMergeAddsTheLaterFilesRecordsAsOneReportWould) {
  RecordsByRank<StepRecord> earlier, later;
  earlier.at(1, 0).phase_ns[kForward] = 5;
  earlier.at(1, 2).step_ns = 100;
  StepRecord& again = later.at(1, 2);  // the same rank and iteration, from a later file of the process
  again.step_ns = 120;
  again.phase_ns[kForward] = 7;
  again.microbatches = 4;
  later.at(2, 2).step_ns = 130;  // a later iteration of a rank both have
  later.at(1, 1).step_ns = 90;   // a rank only the later files have
  earlier.merge(std::move(later));
  EXPECT_TRUE(later.empty());  // NOLINT(bugprone-use-after-move): a merge leaves it empty, and says so
  using Row = std::tuple<std::int64_t, int, std::uint64_t>;
  EXPECT_EQ(visited(earlier), (std::vector<Row>{{1, 0, 0}, {1, 1, 90}, {1, 2, 120}, {2, 2, 130}}));
  const StepRecord* merged = earlier.find(1, 2);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->step_ns, 120u);  // a step read later replaces
  EXPECT_EQ(merged->phase_ns[kForward], 7u);
  EXPECT_EQ(merged->microbatches, 4);
  ASSERT_NE(earlier.find(1, 0), nullptr);
  EXPECT_EQ(earlier.find(1, 0)->phase_ns[kForward], 5u);
}

TEST(Report, AMicroBatchCountPastAnIntIsHeldAtTheLargestInt) {
  Origin origin;
  origin.run_id = "run";
  origin.rank = 0;
  origin.world_size = 1;
  Report report;
  SpanRow forward_backward = span_row(origin, "megatron.forward_backward", 1100, 1900);
  forward_backward.num_microbatches = std::int64_t{1} << 40;  // a file's claim, not a real count
  report.span(forward_backward);
  report.span(span_row(origin, "megatron.microbatch.forward", 1200, 1300));
  report.span(span_row(origin, "megatron.microbatch.backward", 1300, 1500));
  SpanRow step = span_row(origin, "megatron.train_step", 1000, 2000);
  step.iteration = 1;
  report.span(step);
  const Figures figures = report.figures(ReadStats{});
  ASSERT_EQ(figures.bubble.size(), 1u);
  ASSERT_TRUE(figures.bubble[0].microbatches.has_value());
  EXPECT_EQ(*figures.bubble[0].microbatches, 2147483647.0);
}

// Two ranks of one stage (data parallel 2), `iterations` steps of 20 ms: rank 1 computes 1.5x rank 0 in
// the iterations `slowed` holds, and rank 0 waits those 4 ms in the gradient sync (the rule's inputs, exact).
Figures two_replicas(std::int64_t iterations, bool (*slowed)(std::int64_t iteration)) {
  static Origin origins[2];
  for (int rank : {0, 1}) {
    origins[rank].run_id = "run";
    origins[rank].rank = rank;
    origins[rank].world_size = 2;
    origins[rank].pipeline_size = 1;
    origins[rank].data_parallel_size = 2;
  }
  Report report;
  constexpr std::uint64_t kStepNs = 20'000'000, kComputeNs = 4'000'000, kExtraNs = 4'000'000;
  for (std::int64_t i = 1; i <= iterations; ++i) {
    const std::uint64_t start = static_cast<std::uint64_t>(i) * kStepNs;
    for (int rank : {0, 1}) {
      const std::uint64_t extra = slowed(i) && rank == 1 ? kExtraNs : 0;
      const std::uint64_t wait = slowed(i) && rank == 0 ? kExtraNs : 100'000;
      report.span(span_row(origins[rank], "megatron.microbatch.forward", start, start + kComputeNs + extra));
      report.span(span_row(origins[rank], "megatron.microbatch.backward", start + kComputeNs + extra,
                           start + 2 * kComputeNs + extra));
      report.span(span_row(origins[rank], "megatron.grad_sync.finish", start + 2 * kComputeNs + extra,
                           start + 2 * kComputeNs + extra + wait));
      SpanRow step = span_row(origins[rank], "megatron.train_step", start, start + kStepNs - 1);
      step.iteration = i;
      report.span(step);
    }
  }
  return report.figures(ReadStats{});
}

const StragglerRow& row_of_rank(const StragglerFigures& f, int rank) {
  for (const StragglerRow& r : f.ranks)
    if (r.rank == rank) return r;
  ADD_FAILURE() << "no row for rank " << rank;
  return f.ranks.front();
}

// A rank is named where the flag persists: flagged through more than half of its scored steps. A rank the machine
// starved through one window of two is flagged in exactly half, which is no more persistent than not.
TEST(Report, ARankFlaggedInExactlyHalfItsStepsIsNotNamed) {
  const Figures f = two_replicas(2 * StragglerRule::kWindowSteps, [](std::int64_t i) { return i <= 20; });
  const StragglerRow& slow = row_of_rank(f.stragglers, 1);
  EXPECT_EQ(slow.steps_flagged, 20);
  EXPECT_EQ(slow.steps_scored, 40);
  EXPECT_EQ(slow.share, 0.5);
  EXPECT_TRUE(f.stragglers.named.empty());
}

TEST(Report, ARankFlaggedInMoreThanHalfItsStepsIsNamed) {
  const Figures f = two_replicas(3 * StragglerRule::kWindowSteps, [](std::int64_t i) { return i <= 40; });
  ASSERT_EQ(f.stragglers.named.size(), 1u);
  EXPECT_EQ(f.stragglers.named[0].rank, 1);
  EXPECT_EQ(f.stragglers.named[0].steps_flagged, 40);
  EXPECT_EQ(f.stragglers.named[0].steps_scored, 60);
  EXPECT_EQ(row_of_rank(f.stragglers, 0).steps_flagged, 0);
}

TEST(Report, ARankFlaggedInOneWindowOfThreeIsNotNamed) {
  const Figures f = two_replicas(3 * StragglerRule::kWindowSteps, [](std::int64_t i) { return i > 40; });
  EXPECT_EQ(row_of_rank(f.stragglers, 1).steps_flagged, 20);
  EXPECT_TRUE(f.stragglers.named.empty());
}

}  // namespace
}  // namespace lens_tools
