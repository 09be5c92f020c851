#include "hang_verdict.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lens_tools {
namespace {

constexpr double kNow = 1'800'000'000;  // seconds since the epoch: when the newest snapshot was written

Position at(int rank, std::int64_t iteration, std::vector<std::string> chain, const std::string& group,
            double written = kNow) {
  return {.rank = rank,
          .iteration = iteration,
          .chain = std::move(chain),
          .group = group,
          .detail = {},
          .since_seconds = 300,
          .reason = "watchdog",
          .written_seconds = written};
}

Position waiting(int rank, std::int64_t iteration = 57) {
  return at(rank, iteration, {"megatron.train_step", "megatron.grad_sync.finish"}, "communication");
}

Position computing(int rank, std::int64_t iteration = 57) {
  return at(rank, iteration, {"megatron.train_step", "megatron.microbatch.forward"}, "microbatch");
}

std::vector<int> behind_ranks(const Verdict& v) {
  std::vector<int> out;
  for (std::size_t i : v.behind) out.insert(out.end(), v.groups[i].ranks.begin(), v.groups[i].ranks.end());
  return out;
}

TEST(HangVerdict, TheRankNotWaitingWhereTheOthersWaitIsBehind) {
  const Verdict v = judge({waiting(0), waiting(1), computing(3), waiting(2)}, 4);
  EXPECT_EQ(behind_ranks(v), std::vector<int>{3});
  EXPECT_EQ(v.most().ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.never_entered(v.groups[v.behind[0]]), "megatron.grad_sync.finish");
  EXPECT_TRUE(v.missing.empty());
  EXPECT_TRUE(v.stale.empty());
}

TEST(HangVerdict, AnEarlierIterationIsBehindWhateverItIsDoing) {
  const Verdict v = judge({waiting(0, 58), waiting(1, 58), waiting(2, 57)}, 3);
  EXPECT_EQ(behind_ranks(v), std::vector<int>{2});
  EXPECT_EQ(v.never_entered(v.groups[v.behind[0]]), "");  // it is in the span the others wait in
}

TEST(HangVerdict, RanksWithoutASnapshotAreMissingAsRanges) {
  const Verdict v = judge({waiting(0), waiting(1), waiting(4), waiting(5)}, 8);
  EXPECT_EQ(v.missing, (std::vector<RankRange>{{2, 3}, {6, 7}}));
  EXPECT_EQ(v.missing_count, 4);
  EXPECT_TRUE(v.behind.empty());  // then the missing ones are the likeliest to be behind
}

TEST(HangVerdict, ASnapshotAMinuteOlderThanTheNewestIsStaleOnce) {
  const Verdict v = judge({waiting(0), waiting(1), at(2, 57, {"megatron.train_step"}, "job", kNow - 90)}, 3);
  ASSERT_EQ(v.stale.size(), 1u);
  EXPECT_EQ(v.stale[0].rank, 2);
  EXPECT_DOUBLE_EQ(v.stale[0].older_seconds, 90);
  EXPECT_DOUBLE_EQ(v.last_written_seconds - v.first_written_seconds, 90);
}

TEST(HangVerdict, AllInOnePlaceIsNoOneBehind) {
  const Verdict v = judge({computing(0), computing(1), computing(2)}, 3);
  EXPECT_TRUE(v.behind.empty());
  ASSERT_EQ(v.groups.size(), 1u);
  EXPECT_EQ(v.groups[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.reasons.at("watchdog"), 3);
}

TEST(HangVerdict, ANodeBehindIsOneGroupAndTheOtherNodesSnapshotsAreNotStale) {
  // Two nodes of 4 ranks; the second one's clock 2 s ahead, its ranks stuck in a forward the first node's wait for.
  std::vector<Position> positions;
  for (int rank = 0; rank < 4; ++rank) positions.push_back(waiting(rank));
  for (int rank = 4; rank < 8; ++rank) {
    positions.push_back(computing(rank));
    positions.back().written_seconds += 2;
    positions.back().since_seconds = 300 + rank;
  }
  const Verdict v = judge(positions, 8);
  EXPECT_EQ(behind_ranks(v), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(v.groups[v.behind[0]].since_seconds, 307);  // the longest of the group
  EXPECT_TRUE(v.stale.empty());
  EXPECT_TRUE(v.missing.empty());
}

Position aged(Position p, int rank, double since_seconds) {
  p.rank = rank;
  p.since_seconds = since_seconds;
  return p;
}

// A rank stopped (6 s) at one point of a step or of evaluation while the others went on into evaluation, or wait
// there: it is behind.
TEST(HangVerdict, ARankStoppedInComputeWhileTheOthersMovedOnIsBehind) {
  const Position evaluating = at(0, 27, {"megatron.train", "megatron.evaluate"}, "evaluate");
  const Position evaluating_step =
      at(0, 27, {"megatron.train", "megatron.evaluate", "megatron.evaluate.step"}, "evaluate");
  for (const Position& stopped :
       {at(0, 27, {"megatron.train_step", "megatron.forward_backward", "megatron.microbatch.forward"}, "microbatch"),
        at(0, 27, {"megatron.train_step", "megatron.optimizer_step"}, "optimizer"),
        at(0, 27, {"megatron.train_step"}, "step")}) {
    const Verdict v = judge(
        {aged(evaluating, 0, 3.1), aged(stopped, 1, 6.0), aged(evaluating, 2, 2.9), aged(evaluating_step, 3, 0.2)}, 4);
    EXPECT_EQ(behind_ranks(v), std::vector<int>{1}) << stopped.where();
  }
  // Stopped in an evaluation step while the others wait in evaluation's collective.
  const Verdict v =
      judge({aged(waiting(0, 27), 0, 3.1), aged(evaluating_step, 1, 6.0), aged(waiting(0, 27), 2, 3.0)}, 3);
  EXPECT_EQ(behind_ranks(v), std::vector<int>{1});
}

// A pipeline 2 x data 2 job with rank 1 stopped at the start of an evaluation step's forward: its
// pipeline peer sits in that evaluation step, receiving outside any span, and the other replica in the evaluation's
// closing all-reduce; all from the same moment, so the ages alone name nobody. Rank 1 computes inside the spans the
// others sit in: it is behind.
TEST(HangVerdict, ARankComputingInsideTheSpansTheOthersSitInIsBehind) {
  const std::vector<std::string> evaluation = {"megatron.pretrain", "megatron.train", "megatron.evaluate"};
  std::vector<std::string> step = evaluation, forward = evaluation;
  step.push_back("megatron.evaluate.step");
  forward.insert(forward.end(), {"megatron.evaluate.step", "megatron.microbatch.forward"});
  const Verdict v =
      judge({aged(at(0, 5, evaluation, "evaluate"), 0, 3.0), aged(at(0, 5, forward, "microbatch"), 1, 3.0),
             aged(at(0, 5, evaluation, "evaluate"), 2, 3.0), aged(at(0, 5, step, "evaluate"), 3, 3.0)},
            4);
  EXPECT_EQ(behind_ranks(v), std::vector<int>{1});
  // Caught by a signal a moment after it began computing: not yet a second, not named.
  EXPECT_TRUE(judge({aged(at(0, 5, evaluation, "evaluate"), 0, 0.3), aged(at(0, 5, forward, "microbatch"), 1, 0.3)}, 2)
                  .behind.empty());
  // Two ranks computing in different places: the positions do not tell which one holds the other.
  const Position optimizer = at(0, 5, {"megatron.train_step", "megatron.optimizer_step"}, "optimizer");
  EXPECT_TRUE(judge({aged(computing(0, 5), 0, 3.0), aged(optimizer, 1, 3.0)}, 2).behind.empty());
}

// A running job caught by a signal: its positions are all about as old. Nobody is behind.
TEST(HangVerdict, PositionsOfAboutTheSameAgeNameNobody) {
  const Position evaluating = at(0, 57, {"megatron.train", "megatron.evaluate"}, "evaluate");
  const Position optimizer = at(0, 57, {"megatron.train_step", "megatron.optimizer_step"}, "optimizer");
  // The oldest, but less than 1 s older than the next.
  EXPECT_TRUE(judge({aged(computing(0), 0, 0.8), aged(optimizer, 1, 0.5), aged(evaluating, 2, 1.4)}, 3).behind.empty());
  // More than 1 s older, but less than 1.5 times as old.
  EXPECT_TRUE(judge({aged(computing(0), 0, 0.8), aged(optimizer, 1, 2.5), aged(evaluating, 2, 3.6)}, 3).behind.empty());
}

TEST(HangVerdict, ARankBeforeTheFirstIterationAndWithNoOpenSpan) {
  const Verdict v = judge({at(1, -1, {}, ""), at(0, -1, {}, "")}, 2);
  ASSERT_EQ(v.groups.size(), 1u);
  EXPECT_EQ(v.groups[0].first.rank, 0);  // the lowest rank speaks for the group
  EXPECT_EQ(v.groups[0].first.where(), "no open span");
  EXPECT_TRUE(v.behind.empty());
}

}  // namespace
}  // namespace lens_tools
