// Launches 8 real processes as the ranks of a 2-node x 4-GPU torchrun job and checks that each rank
// strategy makes exactly the expected ranks export.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr int kWorldSize = 8;
constexpr int kPerNode = 4;

struct RankResult {
  int exit_code = -1;
  std::string output;
};

// Starts every rank at once (as a launcher would), then collects each one's output and exit code.
std::vector<RankResult> launch(const std::vector<std::string>& extra_env) {
  std::vector<RankResult> results(kWorldSize);
  std::vector<pid_t> pids(kWorldSize);
  std::vector<int> pipes(kWorldSize);
  for (int rank = 0; rank < kWorldSize; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      if (entry.rfind("MEGATRON_OTEL_", 0) != 0 && entry.rfind("NEMO_LENS_", 0) != 0 && entry.rfind("OTEL_", 0) != 0)
        env.push_back(entry);
    }
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("WORLD_SIZE=" + std::to_string(kWorldSize));
    env.push_back("LOCAL_RANK=" + std::to_string(rank % kPerNode));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(kPerNode));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=29500");
    env.push_back("MEGATRON_OTEL_ENABLED=1");
    env.push_back("MEGATRON_OTEL_EXPORTER=file");
    env.push_back("MEGATRON_OTEL_FILE_DIR=" + ::testing::TempDir() + "lens-rank-strategies");
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);

    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    char* argv[] = {const_cast<char*>(LENS_RANK_PROBE), nullptr};
    EXPECT_EQ(posix_spawn(&pids[rank], LENS_RANK_PROBE, &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    pipes[rank] = fds[0];
  }
  for (int rank = 0; rank < kWorldSize; ++rank) {
    std::array<char, 256> buffer;
    ssize_t n;
    while ((n = read(pipes[rank], buffer.data(), buffer.size())) > 0) results[rank].output.append(buffer.data(), n);
    close(pipes[rank]);
    int status = 0;
    waitpid(pids[rank], &status, 0);
    results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return results;
}

std::set<int> exporting_ranks(const std::vector<std::string>& extra_env) {
  std::set<int> exporting;
  std::vector<RankResult> results = launch(extra_env);
  for (int rank = 0; rank < kWorldSize; ++rank) {
    EXPECT_EQ(results[rank].exit_code, 0) << "rank " << rank;
    int reported_rank = -1, exports = -1;
    EXPECT_EQ(std::sscanf(results[rank].output.c_str(), "rank %d exports %d", &reported_rank, &exports), 2)
        << results[rank].output;
    EXPECT_EQ(reported_rank, rank);
    if (exports == 1) exporting.insert(rank);
  }
  return exporting;
}

TEST(RankStrategiesAcrossProcesses, SingleRankDefaultIsTheLastRank) {
  EXPECT_EQ(exporting_ranks({}), (std::set<int>{7}));
}

TEST(RankStrategiesAcrossProcesses, SingleRankWithExportRank) {
  EXPECT_EQ(exporting_ranks({"MEGATRON_OTEL_EXPORT_RANK=3"}), (std::set<int>{3}));
}

TEST(RankStrategiesAcrossProcesses, AllRanks) {
  EXPECT_EQ(exporting_ranks({"MEGATRON_OTEL_RANK_STRATEGY=all_ranks"}), (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(RankStrategiesAcrossProcesses, SampledAtHalf) {
  // Scores 0.785 0.8411 0.9212 0.0883 0.19 0.0693 0.0412 0.5555: below 0.5 are ranks 3..6.
  EXPECT_EQ(exporting_ranks({"MEGATRON_OTEL_RANK_STRATEGY=sampled", "MEGATRON_OTEL_EXPORT_SAMPLE_RATE=0.5"}),
            (std::set<int>{3, 4, 5, 6}));
}

TEST(RankStrategiesAcrossProcesses, FirstRankPerNodeViaTheAlias) {
  EXPECT_EQ(exporting_ranks({"NEMO_LENS_EXPORT_STRATEGY=first_rank_per_node"}), (std::set<int>{0, 4}));
}

TEST(RankStrategiesAcrossProcesses, CustomStrategy) {
  EXPECT_EQ(exporting_ranks({"MEGATRON_OTEL_RANK_STRATEGY=even_ranks"}), (std::set<int>{0, 2, 4, 6}));
}

TEST(RankStrategiesAcrossProcesses, ExportingRankEnablesGroupsOthersNone) {
  // With hang snapshots off: a rank that does not export records nothing (CONTRACT §3).
  std::vector<RankResult> results = launch({"MEGATRON_OTEL_SPAN_GROUPS=job,layer", "MEGATRON_OTEL_HANG_SIGNAL=none"});
  for (int rank = 0; rank < kWorldSize; ++rank) {
    std::string expected = rank == 7 ? "exports 1 groups job,layer; sites job,layer\n" : "exports 0 groups ; sites \n";
    EXPECT_NE(results[rank].output.find(expected), std::string::npos) << rank << ": " << results[rank].output;
  }
}

TEST(RankStrategiesAcrossProcesses, WithHangSnapshotsEveryRankKeepsItsGroupsAndOnlyOneExports) {
  // The default: the others enable nothing (as the source documents say) but keep positions of the same groups for a
  // hang snapshot, exporting nothing; every rank keeps the loop's groups as positions.
  std::vector<RankResult> results = launch({"MEGATRON_OTEL_SPAN_GROUPS=job,layer"});
  const std::string sites = "; sites job,step,forward_backward,microbatch,layer,communication\n";
  for (int rank = 0; rank < kWorldSize; ++rank) {
    std::string expected = rank == 7 ? "exports 1 groups job,layer" + sites : "exports 0 groups " + sites;
    EXPECT_NE(results[rank].output.find(expected), std::string::npos) << rank << ": " << results[rank].output;
  }
}

TEST(RankStrategiesAcrossProcesses, ATypoFailsOnEveryRank) {
  for (const RankResult& r : launch({"MEGATRON_OTEL_SPAN_GROUPS=per_stpe"})) EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
