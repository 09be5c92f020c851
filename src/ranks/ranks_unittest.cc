#include "lens/ranks.h"

#include <gtest/gtest.h>

#include <map>

#include "lens/config.h"
#include "ranks/detect.h"
#include "ranks/strategies.h"

namespace lens {
namespace {

using Env = std::map<std::string, std::string>;

RankInfo detect(const Env& env, std::optional<int> rank = {}, std::optional<int> world = {},
                std::optional<int> local = {}) {
  return internal::detect_rank_info_from(
      [env](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      rank, world, local);
}

TEST(SampledRule, MatchesTheMd5VectorsOfTheReference) {
  const double expected[] = {0.785, 0.8411, 0.9212, 0.0883, 0.19, 0.0693, 0.0412, 0.5555};
  for (int rank = 0; rank < 8; ++rank) EXPECT_DOUBLE_EQ(sampled_rank_score(rank), expected[rank]) << rank;
}

TEST(Strategies, SingleRankDefaultsToTheLastRank) {
  RankStrategyInput in{{7, 8, 3}, -1, 1.0};
  EXPECT_TRUE(rank_exports("single_rank", in));
  in.ranks.rank = 0;
  EXPECT_FALSE(rank_exports("single_rank", in));
  in.export_rank = 0;
  EXPECT_TRUE(rank_exports("single_rank", in));
}

TEST(Strategies, AllRanksAndFirstRankPerNode) {
  EXPECT_TRUE(rank_exports("all_ranks", {{5, 8, 1}}));
  EXPECT_TRUE(rank_exports("first_rank_per_node", {{4, 8, 0}}));
  EXPECT_FALSE(rank_exports("first_rank_per_node", {{5, 8, 1}}));
}

// The lowest exporting rank exports the step layout's roots (CONTRACT §6): each rank learns whether it is that rank
// with no message, by asking the strategy about the ranks below it.
TEST(Strategies, OnlyTheLowestExportingRankFindsNoLowerRankExporting) {
  auto lower_exports = [](std::string_view strategy, RankInfo ranks, long long export_rank = -1) {
    return internal::a_lower_rank_exports(strategy, {ranks, export_rank, 1.0}, "test");
  };
  EXPECT_FALSE(lower_exports("all_ranks", {0, 8, 0}));
  EXPECT_TRUE(lower_exports("all_ranks", {1, 8, 1}));
  EXPECT_FALSE(lower_exports("single_rank", {7, 8, 3}));  // the last rank, alone
  EXPECT_FALSE(lower_exports("single_rank", {3, 8, 3}, 3));
  EXPECT_TRUE(lower_exports("first_rank_per_node", {4, 8, 0}));  // rank 0 is its node's first
  int lowest_sampled = 0;
  while (sampled_rank_score(lowest_sampled) >= 0.5) ++lowest_sampled;
  EXPECT_FALSE(internal::a_lower_rank_exports("sampled", {{lowest_sampled, 64, 0}, -1, 0.5}, "test"));
  EXPECT_TRUE(internal::a_lower_rank_exports("sampled", {{63, 64, 0}, -1, 0.5}, "test") || lowest_sampled == 63);
}

TEST(Strategies, SampledComparesTheScoreWithTheRate) {
  // rank 3 scores 0.0883, rank 0 scores 0.785.
  EXPECT_TRUE(rank_exports("sampled", {{3, 8, 3}, -1, 0.1}));
  EXPECT_FALSE(rank_exports("sampled", {{0, 8, 0}, -1, 0.785}));  // strictly below
  EXPECT_TRUE(rank_exports("sampled", {{0, 8, 0}, -1, 0.7851}));
  EXPECT_FALSE(rank_exports("sampled", {{3, 8, 3}, -1, 0.0}));
  EXPECT_TRUE(rank_exports("sampled", {{2, 8, 2}, -1, 1.0}));
}

TEST(Registry, CustomStrategyRegistersOverridesAndUnregisters) {
  register_rank_strategy("odd", [](const RankStrategyInput& in) { return in.ranks.rank % 2 == 1; });
  EXPECT_TRUE(has_rank_strategy("odd"));
  EXPECT_TRUE(rank_exports("odd", {{1, 8, 1}}));
  EXPECT_THROW(register_rank_strategy("odd", [](const RankStrategyInput&) { return true; }), std::invalid_argument);
  register_rank_strategy(
      "odd", [](const RankStrategyInput&) { return false; }, /*allow_override=*/true);
  EXPECT_FALSE(rank_exports("odd", {{1, 8, 1}}));
  unregister_rank_strategy("odd");
  EXPECT_FALSE(has_rank_strategy("odd"));
  EXPECT_THROW(unregister_rank_strategy("odd"), std::invalid_argument);
}

TEST(Registry, BuiltinsCannotBeRemovedAndNamesAreSorted) {
  for (const char* name : {"single_rank", "all_ranks", "sampled", "first_rank_per_node"}) {
    try {
      unregister_rank_strategy(name);
      FAIL() << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("built in"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(rank_strategy_names(),
            (std::vector<std::string>{"all_ranks", "first_rank_per_node", "sampled", "single_rank"}));
  EXPECT_THROW(register_rank_strategy("x", nullptr), std::invalid_argument);
}

TEST(Registry, UnknownStrategyIsAConfigErrorNamingTheSource) {
  try {
    rank_exports("nope", {}, "MEGATRON_OTEL_RANK_STRATEGY");
    FAIL();
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'nope' from MEGATRON_OTEL_RANK_STRATEGY"), std::string::npos) << m;
    EXPECT_NE(m.find("all_ranks, first_rank_per_node, sampled, single_rank"), std::string::npos) << m;
  }
}

TEST(Detect, NoLauncherMeansRankZeroOfOne) { EXPECT_EQ(detect({}), (RankInfo{0, 1, 0})); }

TEST(Detect, EachLauncher) {
  EXPECT_EQ(detect({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}), (RankInfo{5, 8, 1}));
  EXPECT_EQ(detect({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}}), (RankInfo{9, 16, 1}));
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}),
            (RankInfo{2, 4, 0}));
  EXPECT_EQ(detect({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}), (RankInfo{3, 4, 0}));
}

TEST(Detect, TorchrunBeatsSlurmAndTheCallerBeatsBoth) {
  Env env{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}};
  EXPECT_EQ(detect(env), (RankInfo{1, 2, 0}));
  EXPECT_EQ(detect(env, 6, 8, 2), (RankInfo{6, 8, 2}));
}

TEST(Detect, MalformedOrInconsistentValuesAreErrors) {
  try {
    detect({{"RANK", "two"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='two'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detect({{"WORLD_SIZE", "0"}}), ConfigError);
  EXPECT_THROW(detect({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), ConfigError);
  EXPECT_THROW(detect({{"LOCAL_RANK", "-1"}}), ConfigError);
  EXPECT_THROW(detect({}, 3, 2), ConfigError);
}

}  // namespace
}  // namespace lens
