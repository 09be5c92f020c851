// The straggler rule (src/watch/straggler_rule.h) on chosen windows, and a rank's side of lens/straggler.h: its
// window's summary, and the exporting rank's scoring of gathered summaries, bad ones included. Real jobs (ranks slowed
// by the trainer and paused from outside) are in tests/straggler/straggler_test.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "hang/snapshot.h"
#include "lens/control.h"
#include "lens/straggler.h"
#include "metrics/instruments.h"
#include "watch/step_watch.h"
#include "watch/straggler_rule.h"

namespace lens {
namespace {

using straggler::RankWindow;
using straggler::Score;
using straggler::score_window;

constexpr double kMs = 1e6;

std::vector<RankWindow> two_stages_of_two(double slow_compute_ms, double slow_wait_ms) {
  return {{.rank = 0, .stage = 0, .steps = 20, .compute_ns = 30 * kMs, .wait_ns = 30 * kMs},
          {.rank = 1, .stage = 0, .steps = 20, .compute_ns = slow_compute_ms * kMs, .wait_ns = slow_wait_ms * kMs},
          {.rank = 2, .stage = 1, .steps = 20, .compute_ns = 31 * kMs, .wait_ns = 40 * kMs},
          {.rank = 3, .stage = 1, .steps = 20, .compute_ns = 29 * kMs, .wait_ns = 42 * kMs}};
}

TEST(StragglerRule, InAStageOfTwoTheRankThatComputesLongerAndWaitsLessIsFlagged) {
  const auto scores = score_window(two_stages_of_two(48, 8));  // a rank paused 40 % of the time: 1.6x, waits less
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_TRUE(scores[1].flagged);
  EXPECT_DOUBLE_EQ(scores[1].score, 1.6);
  EXPECT_DOUBLE_EQ(scores[1].peer_compute_ns, 30 * kMs);
  EXPECT_DOUBLE_EQ(scores[1].peer_wait_ns, 30 * kMs);
  for (int other : {0, 2, 3}) EXPECT_FALSE(scores[static_cast<std::size_t>(other)].flagged) << other;
  EXPECT_DOUBLE_EQ(scores[0].score, 30.0 / 48);
}

// TP 2 x DP 2: a rank's peers are the ranks of its stage at its tensor-parallel position (its replica's), never its
// tensor-parallel partner, which waits for it inside the layer's all-reduces.
TEST(StragglerRule, ARankIsComparedWithItsStageAtItsTensorParallelPositionOnly) {
  std::vector<RankWindow> ranks = {
      {.rank = 0, .stage = 0, .tensor_rank = 0, .steps = 20, .compute_ns = 30 * kMs, .wait_ns = 30 * kMs},
      {.rank = 1, .stage = 0, .tensor_rank = 1, .steps = 20, .compute_ns = 48 * kMs, .wait_ns = 8 * kMs},
      {.rank = 2, .stage = 0, .tensor_rank = 0, .steps = 20, .compute_ns = 31 * kMs, .wait_ns = 29 * kMs},
      {.rank = 3, .stage = 0, .tensor_rank = 1, .steps = 20, .compute_ns = 30 * kMs, .wait_ns = 30 * kMs}};
  const auto scores = score_window(ranks);
  EXPECT_TRUE(scores[1].flagged);
  EXPECT_EQ(scores[1].tensor_rank, 1);
  EXPECT_DOUBLE_EQ(scores[1].peer_compute_ns, 30 * kMs) << "rank 3 is its one peer";
  EXPECT_DOUBLE_EQ(scores[0].peer_compute_ns, 31 * kMs) << "rank 2 is its one peer";
  ranks.pop_back();  // rank 1 alone at its position: not scored
  EXPECT_FALSE(score_window(ranks)[1].scored);
}

TEST(StragglerRule, ASlowerRankThatWaitsMoreThanItsPeerIsNotTheOneWaitedFor) {
  EXPECT_FALSE(score_window(two_stages_of_two(48, 35))[1].flagged);
}

TEST(StragglerRule, ASlowerRankWhosePeerDoesNotWaitForItIsNotFlagged) {
  // Behind a straggling stage, a rank's extra compute fits in time it would have waited on that stage: 1.32x its
  // peer, but its peer waits only 4 ms longer than it does for its 13 ms more (figures of a CI run).
  std::vector<RankWindow> behind = {
      {.rank = 2, .stage = 1, .steps = 10, .compute_ns = 40.7 * kMs, .wait_ns = 53.1 * kMs},
      {.rank = 3, .stage = 1, .steps = 10, .compute_ns = 53.8 * kMs, .wait_ns = 49.1 * kMs}};
  EXPECT_FALSE(score_window(behind)[1].flagged);
  behind[0].wait_ns = 49.1 * kMs + 6.6 * kMs;  // half of its extra compute: the peer waits for it
  EXPECT_TRUE(score_window(behind)[1].flagged);
}

TEST(StragglerRule, ARankWaitingForAWorseStragglerOfItsStageIsNotFlagged) {
  // Data parallel 4, rank 2 slowed 60 ms a micro-batch on a loaded machine (lens_real_run_test's job): rank 1
  // computes 1.31x the others, and so waits for rank 2 1.8 ms less than they do, but it waits 118 ms itself.
  std::vector<RankWindow> stage = {{.rank = 0, .steps = 20, .compute_ns = 5.29 * kMs, .wait_ns = 131.2 * kMs},
                                   {.rank = 1, .steps = 20, .compute_ns = 7.45 * kMs, .wait_ns = 130.28 * kMs},
                                   {.rank = 2, .steps = 20, .compute_ns = 126.1 * kMs, .wait_ns = 12.5 * kMs},
                                   {.rank = 3, .steps = 20, .compute_ns = 5.69 * kMs, .wait_ns = 131.6 * kMs}};
  const auto scores = score_window(stage);
  EXPECT_GE(scores[1].score, 1.3);
  for (const auto& s : scores) EXPECT_EQ(s.flagged, s.rank == 2) << s.rank;
  stage[1].compute_ns = 126 * kMs;  // slowed as much as rank 2: it waits for no one, and both are named
  stage[1].wait_ns = 12.6 * kMs;
  for (const auto& s : score_window(stage)) EXPECT_EQ(s.flagged, s.rank == 1 || s.rank == 2) << s.rank;
}

TEST(StragglerRule, NoiseBelowTheRatioAndTinyStepsAreNotFlagged) {
  EXPECT_FALSE(score_window(two_stages_of_two(37.5, 8))[1].flagged);  // 1.25x
  std::vector<RankWindow> tiny = {{.rank = 0, .steps = 20, .compute_ns = 0.1 * kMs, .wait_ns = 0.1 * kMs},
                                  {.rank = 1, .steps = 20, .compute_ns = 0.25 * kMs, .wait_ns = 0}};
  EXPECT_FALSE(score_window(tiny)[1].flagged);  // 2.5x, but 0.15 ms more: timer noise
}

TEST(StragglerRule, ALoneRankOrAShortWindowIsNotScored) {
  std::vector<RankWindow> alone = {{.rank = 0, .stage = 0, .steps = 20, .compute_ns = 30 * kMs},
                                   {.rank = 1, .stage = 1, .steps = 20, .compute_ns = 90 * kMs}};
  for (const auto& s : score_window(alone)) EXPECT_FALSE(s.scored);
  auto short_window = two_stages_of_two(48, 8);
  short_window[0].steps = 2;
  EXPECT_FALSE(score_window(short_window)[1].scored);  // its only peer has too few steps
}

// The rule as CONTRACT §10 states it, one rank at a time: its peers are the other ranks of its stage with enough
// steps. score_window answers it for every rank at once in O(n log n); both must agree to the bit, duplicates, short
// windows and several stages included.
Score score_by_definition(const RankWindow& self, const std::vector<RankWindow>& all) {
  Score s{.rank = self.rank, .stage = self.stage, .compute_ns = self.compute_ns, .wait_ns = self.wait_ns};
  std::vector<double> compute, wait;
  for (const RankWindow& peer : all) {
    if (peer.stage != self.stage || peer.rank == self.rank || peer.steps < straggler::Rule::kMinSteps) continue;
    compute.push_back(peer.compute_ns);
    wait.push_back(peer.wait_ns);
  }
  if (compute.empty() || self.steps < straggler::Rule::kMinSteps) return s;
  s.scored = true;
  s.peer_compute_ns = straggler::median_of(compute);
  const double least = *std::min_element(wait.begin(), wait.end());
  s.peer_wait_ns = straggler::median_of(wait);
  s.score = s.peer_compute_ns > 0 ? self.compute_ns / s.peer_compute_ns : 1.0;
  const double excess = self.compute_ns - s.peer_compute_ns,
               share = straggler::Rule::kWaitedForShare * std::max(excess, 0.0);
  const bool waited_for = (s.peer_wait_ns == 0 && self.wait_ns == 0) ||
                          (s.peer_wait_ns - self.wait_ns >= share && self.wait_ns - least <= share);
  s.flagged = s.score >= straggler::Rule::kComputeRatio && excess >= straggler::Rule::kMinExcessNs && waited_for;
  return s;
}

TEST(StragglerRule, EveryRankIsScoredAsTheDefinitionSaysWhateverTheStage) {
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<RankWindow> ranks;
    const int n = 1 + static_cast<int>(random() % 40), stages = 1 + static_cast<int>(random() % 3);
    for (int r = 0; r < n; ++r) {
      ranks.push_back({.rank = r,
                       .stage = static_cast<int>(random() % static_cast<unsigned>(stages)),
                       .steps = static_cast<std::int64_t>(random() % 6),           // some below kMinSteps
                       .compute_ns = 1e6 * static_cast<double>(1 + random() % 8),  // many equal values
                       .wait_ns = 1e6 * static_cast<double>(random() % 5)});
    }
    const std::vector<Score> scores = score_window(ranks);
    ASSERT_EQ(scores.size(), ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const Score expected = score_by_definition(ranks[i], ranks);
      EXPECT_EQ(scores[i].rank, expected.rank);
      EXPECT_EQ(scores[i].scored, expected.scored) << round << " rank " << i;
      EXPECT_EQ(scores[i].flagged, expected.flagged) << round << " rank " << i;
      EXPECT_EQ(scores[i].score, expected.score) << round << " rank " << i;
      EXPECT_EQ(scores[i].peer_compute_ns, expected.peer_compute_ns) << round << " rank " << i;
      EXPECT_EQ(scores[i].peer_wait_ns, expected.peer_wait_ns) << round << " rank " << i;
    }
  }
}

TEST(StragglerRule, InALargerStageThePeersMedianIsTheReference) {
  std::vector<RankWindow> stage;
  for (int r = 0; r < 8; ++r)
    stage.push_back({.rank = r, .steps = 20, .compute_ns = (30 + r % 3) * kMs, .wait_ns = 20 * kMs});
  stage[5].compute_ns = 45 * kMs;
  stage[5].wait_ns = 5 * kMs;
  const auto scores = score_window(stage);
  for (const auto& s : scores) EXPECT_EQ(s.flagged, s.rank == 5) << s.rank;
}

// ---- a rank's window and the exporting rank's scoring ----

class StepWatch : public ::testing::Test {
 protected:
  void SetUp() override {
    internal::set_metrics_recording(true);
    internal::configure_step_watch({.interval = 5, .run_id = "run-a", .rank = 0, .exports = true});
  }
  void TearDown() override {
    internal::reset_iteration_progress();  // the boundaries a test noted are not the next test's
    internal::configure_step_watch({});
    internal::set_metrics_recording(false);
  }
  static StragglerSummary summary(std::int64_t stage, std::int64_t compute_ms, std::int64_t wait_ms,
                                  std::int64_t iteration = 10) {
    return {.run_tag = internal::run_tag_of("run-a"),
            .iteration = iteration,
            .stage = stage,
            .steps = 5,
            .compute_ns = compute_ms * 1'000'000,
            .wait_ns = wait_ms * 1'000'000,
            .exports = stage == 0 ? 1 : 0};
  }
  // Hands the gather to the scoring thread and takes its findings (nullopt: this rank does not score).
  static std::optional<StragglerFindings> scored(std::int64_t iteration,
                                                 const std::vector<StragglerSummary>& gathered) {
    take_straggler_findings();  // an earlier test's, if any
    if (!score_stragglers(iteration, gathered)) return std::nullopt;
    return take_straggler_findings(std::chrono::seconds(30));
  }
  static double gauge(const std::string& name, int rank) {
    for (const auto& m : internal::MetricCollector(Temporality::kCumulative).collect()) {
      if (m.name != name) continue;
      for (const auto& p : m.points)
        for (const auto& [key, value] : p.attributes)
          if (key == "dl.rank" && std::get_if<std::int64_t>(&value) && *std::get_if<std::int64_t>(&value) == rank)
            return m.integer ? static_cast<double>(p.int_value) : p.double_value;
    }
    return -1;
  }
};

TEST_F(StepWatch, AWindowIsTheMedianOfItsStepsPhasesAndIsDueEveryIntervalSteps) {
  for (int step = 1; step <= 5; ++step) {
    {
      LENS_STEP_PHASE(StepPhase::kCompute);
      std::this_thread::sleep_for(std::chrono::milliseconds(step == 3 ? 30 : 2));  // one slow step: not the median
    }
    {
      LENS_STEP_PHASE(StepPhase::kWait);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    end_step(step);
    EXPECT_EQ(straggler_summary_due(step), step == 5);
  }
  const StragglerSummary s = take_straggler_summary(5, 1);
  EXPECT_EQ(s.run_tag, internal::run_tag_of("run-a"));
  EXPECT_EQ(s.exports, 1);
  EXPECT_EQ((std::vector<std::int64_t>{s.iteration, s.stage, s.steps}), (std::vector<std::int64_t>{5, 1, 5}));
  EXPECT_GE(s.compute_ns, 2'000'000);
  EXPECT_LT(s.compute_ns, 20'000'000);
  EXPECT_GE(s.wait_ns, 1'000'000);
  EXPECT_EQ(take_straggler_summary(10, 1).steps, 0);  // the window starts again
}

// A tensor-parallel all-reduce inside a layer's forward is a wait: it is counted in the step's wait and taken out of
// the compute around it, so the partner of a slow rank does not look slow.
TEST_F(StepWatch, AWaitInsideAComputeScopeIsTakenOutOfTheCompute) {
  for (int step = 1; step <= 5; ++step) {
    {
      LENS_STEP_PHASE(StepPhase::kCompute);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      {
        LENS_STEP_PHASE(StepPhase::kWait);
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
      }
    }
    end_step(step);
  }
  const StragglerSummary s = take_straggler_summary(5, 1, 1);
  EXPECT_GE(s.wait_ns, 40'000'000);
  EXPECT_GE(s.compute_ns, 2'000'000);
  EXPECT_LT(s.compute_ns, 20'000'000) << "the 40 ms wait is not compute";
  EXPECT_EQ(s.tensor_rank, 1);
  EXPECT_EQ(StragglerSummary::decode(s.encode()).tensor_rank, 1);
}

TEST_F(StepWatch, TheExportingRankScoresRecordsEachRanksFiguresAndNamesTheStraggler) {
  const std::vector<StragglerSummary> gathered = {summary(0, 30, 30), summary(0, 48, 8), summary(1, 30, 40),
                                                  summary(1, 31, 41)};
  const auto found = scored(10, gathered);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->flagged, std::vector<int>{1});
  EXPECT_NE(found->text.find("rank 1 (stage 0) is a straggler over the 5 steps to iteration 10: it computes 1.60x"),
            std::string::npos)
      << found->text;
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.score", 1), 1.6);
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.flagged", 1), 1);
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.flagged", 0), 0);
  EXPECT_DOUBLE_EQ(gauge("lens.step.compute", 1), 48);
  EXPECT_DOUBLE_EQ(gauge("lens.step.wait", 3), 41);
}

// A summary carries its rank's host name (up to 66 bytes, 6 to a word, each word below 2^48 so a float all-reduce
// keeps it exact) and local rank; what the scoring rank records about a rank carries that rank's, not its own.
TEST_F(StepWatch, WhatTheScorerRecordsAboutARankNamesThatRanksHostAndLocalRank) {
  const std::string long_name(64, 'n');
  StragglerSummary round;
  round.set_host_name(long_name);
  EXPECT_EQ(StragglerSummary::decode(round.encode()).host_name(), long_name);
  round.set_host_name(std::string(70, 'x'));
  EXPECT_EQ(round.host_name(), std::string(66, 'x')) << "cut at 66 bytes";
  for (std::int64_t word : round.host) EXPECT_LT(word, std::int64_t{1} << 48);

  internal::configure_step_watch(
      {.interval = 5, .run_id = "run-a", .rank = 0, .local_rank = 3, .host = "node-a", .exports = true});
  end_step(1);
  const StragglerSummary mine = take_straggler_summary(5, 0);
  EXPECT_EQ(mine.host_name(), "node-a");
  EXPECT_EQ(mine.local_rank, 3);

  std::vector<StragglerSummary> gathered = {summary(0, 30, 30), summary(0, 48, 8), summary(1, 30, 40),
                                            summary(1, 31, 41)};
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    gathered[r].set_host_name(r < 2 ? "node-a" : "node-b");
    gathered[r].local_rank = static_cast<std::int64_t>(r % 2);
  }
  const auto found = scored(10, gathered);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->ranks.at(1).host, "node-a");
  EXPECT_EQ(found->ranks.at(3).local_rank, 1);
  EXPECT_NE(found->text.find("(host node-a, local rank 1)"), std::string::npos) << found->text;
  std::set<std::vector<std::string>> series;  // (rank, host, local rank, instance) of every point (earlier tests' too)
  for (const auto& m : internal::MetricCollector(Temporality::kCumulative).collect()) {
    if (m.name != "lens.straggler.flagged_windows") continue;
    for (const auto& p : m.points) {
      std::map<std::string, std::string> a;
      for (const auto& [key, value] : p.attributes)
        a[key] = std::holds_alternative<std::string>(value) ? std::get<std::string>(value)
                                                            : std::to_string(std::get<std::int64_t>(value));
      series.insert({a["dl.rank"], a["host.name"], a["dl.local_rank"], a["service.instance.id"]});
    }
  }
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(series.contains({std::to_string(rank), rank < 2 ? "node-a" : "node-b", std::to_string(rank % 2),
                                 "run-a-rank" + std::to_string(rank)}))
        << rank;
}

// The alert waits for two windows in a row: each verdict counts the windows in a row that named its rank, and a window
// that does not name it starts the count again.
TEST_F(StepWatch, EachVerdictCountsTheWindowsInARowThatNamedItsRank) {
  const std::vector<StragglerSummary> slow_rank_1 = {summary(0, 30, 30), summary(0, 48, 8), summary(1, 30, 40),
                                                     summary(1, 31, 41)};
  std::vector<StragglerSummary> later = slow_rank_1;
  for (StragglerSummary& s : later) s.iteration = 15;
  std::vector<StragglerSummary> even = {summary(0, 30, 30, 20), summary(0, 30, 30, 20), summary(1, 30, 40, 20),
                                        summary(1, 31, 41, 20)};
  ASSERT_EQ(scored(10, slow_rank_1)->ranks.at(1).flagged_windows, 1);
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.flagged_windows", 1), 1);
  const auto second = scored(15, later);
  EXPECT_EQ(second->ranks.at(1).flagged_windows, 2);
  EXPECT_EQ(second->ranks.at(0).flagged_windows, 0);
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.flagged_windows", 1), 2);
  EXPECT_EQ(scored(20, even)->ranks.at(1).flagged_windows, 0);
  EXPECT_DOUBLE_EQ(gauge("lens.straggler.flagged_windows", 1), 0);
}

TEST_F(StepWatch, AnotherRunsOrWindowsSummaryOrImpossibleTimesAreRefusedAndCounted) {
  StragglerSummary other_run = summary(0, 48, 8);
  other_run.run_tag = internal::run_tag_of("run-b");
  StragglerSummary negative = summary(1, -3, 8);
  const std::vector<StragglerSummary> gathered = {summary(0, 30, 30), other_run, summary(1, 30, 40, 5), negative,
                                                  summary(1, 30, 40)};
  const auto found = scored(10, gathered);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->refused, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(found->flagged.empty());
  for (const auto& v : found->ranks) EXPECT_NE(v.rank, 1);  // never scored
  EXPECT_NE(found->text.find("refused the summaries of ranks 1, 2, 3"), std::string::npos) << found->text;
  for (const auto& m : internal::MetricCollector(Temporality::kCumulative).collect())
    if (m.name == "lens.straggler.refused") {
      EXPECT_GE(m.points.at(0).int_value, 3);
    }
}

TEST_F(StepWatch, ARankMissingFromTheGatherIsNamedMissingNotScoredAsFast) {
  const std::vector<StragglerSummary> gathered = {summary(0, 48, 8), StragglerSummary{}, summary(1, 30, 40),
                                                  summary(1, 30, 40)};
  const auto found = scored(10, gathered);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->missing, std::vector<int>{1});
  EXPECT_TRUE(found->flagged.empty());  // rank 0 has no peer left in its stage
  EXPECT_NE(found->text.find("no summary from ranks 1"), std::string::npos) << found->text;
}

TEST_F(StepWatch, OnlyTheLowestExportingRankScores) {
  const std::vector<StragglerSummary> gathered = {summary(0, 30, 30), summary(0, 30, 30)};  // both export
  internal::configure_step_watch({.interval = 5, .run_id = "run-a", .rank = 1, .exports = true});
  EXPECT_FALSE(score_stragglers(10, gathered));
  internal::configure_step_watch({.interval = 5, .run_id = "run-a", .rank = 0, .exports = false});
  EXPECT_FALSE(score_stragglers(10, gathered));
}

// Scoring runs on lens's scoring thread: score_stragglers returns once the gather is copied, and the findings are
// taken later, each once.
TEST_F(StepWatch, ScoringRunsOffTheCallingThreadAndItsFindingsAreTakenOnce) {
  const std::vector<StragglerSummary> gathered = {summary(0, 30, 30), summary(0, 48, 8)};
  take_straggler_findings();
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id scored_on;
  internal::set_scoring_observer_for_testing([&] { scored_on = std::this_thread::get_id(); });
  ASSERT_TRUE(score_stragglers(10, gathered));
  const auto found = take_straggler_findings(std::chrono::seconds(30));
  internal::set_scoring_observer_for_testing(nullptr);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->flagged, std::vector<int>{1});
  EXPECT_NE(scored_on, std::thread::id{});
  EXPECT_NE(scored_on, caller);
  EXPECT_FALSE(take_straggler_findings().has_value()) << "taken once";
}

TEST_F(StepWatch, TheHeartbeatAndGoodputAreTakenAtCollection) {
  at_iteration_boundary(1, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end_step(1);
  at_iteration_boundary(2, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // iteration 2 runs, or hangs
  std::map<std::string, double> value;
  for (const auto& m : internal::MetricCollector(Temporality::kCumulative).collect())
    if (!m.points.empty())
      value[m.name] = m.integer ? static_cast<double>(m.points[0].int_value) : m.points[0].double_value;
  EXPECT_EQ(value["lens.progress.iteration"], 1);
  EXPECT_GE(value["lens.progress.since_last_iteration"], 0.03);
  EXPECT_GE(value["lens.goodput.step_time"], 0.02);
  EXPECT_GT(value["lens.goodput.wall_time"], value["lens.goodput.step_time"]);
  EXPECT_GT(value["lens.goodput.ratio"], 0);
  EXPECT_LT(value["lens.goodput.ratio"], 1);
}

TEST_F(StepWatch, ARankThatDoesNotExportOrScoringOffScoresNothing) {
  internal::configure_step_watch({.interval = 5, .run_id = "run-a", .rank = 0, .exports = false});
  EXPECT_FALSE(score_stragglers(10, std::vector<StragglerSummary>{summary(0, 30, 30)}));
  internal::configure_step_watch({});
  EXPECT_FALSE(straggler_summary_due(20));
  end_step(1);
  EXPECT_EQ(take_straggler_summary(5, 0).steps, 0);
}

}  // namespace
}  // namespace lens
