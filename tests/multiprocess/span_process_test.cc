// Spans across processes: ids unique across 8 identically seeded ranks, SIGTERM flushing what was recorded,
// and fork in the middle of spans.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "lens/megatron.h"
#include "lens/telemetry.h"

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
namespace mg = lens::megatron::group;

std::string fresh_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "lens-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
};

Child spawn_probe(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (entry.rfind("MEGATRON_OTEL_", 0) != 0 && entry.rfind("NEMO_LENS_", 0) != 0) env.push_back(entry);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string program = LENS_SPAN_PROBE;
  argv.push_back(program.data());
  std::vector<std::string> args_copy = args;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  Child c;
  EXPECT_EQ(posix_spawn(&c.pid, program.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  c.stdout_fd = fds[0];
  return c;
}

int wait_status(const Child& c) {
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  ::close(c.stdout_fd);
  return status;
}

std::vector<json> read_spans(const std::string& path) {
  std::vector<json> spans;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json request = json::parse(line);
    for (const json& rs : request["resourceSpans"])
      for (const json& ss : rs["scopeSpans"])
        for (const json& s : ss["spans"]) spans.push_back(s);
  }
  return spans;
}

bool truncated(const json& span) {
  if (!span.contains("attributes")) return false;
  for (const json& kv : span["attributes"])
    if (kv["key"] == "nemo.span.truncated" && kv["value"]["boolValue"] == true) return true;
  return false;
}

std::vector<std::string> file_env(const std::string& dir, const std::string& run_id) {
  return {"MEGATRON_OTEL_ENABLED=1", "MEGATRON_OTEL_EXPORTER=file", "MEGATRON_OTEL_FILE_DIR=" + dir,
          "MEGATRON_OTEL_RUN_ID=" + run_id, "MEGATRON_OTEL_SPAN_GROUPS=all"};
}

TEST(SpanIds, UniqueAcrossEightIdenticallySeededRanks) {
  std::string dir = fresh_dir("ids");
  std::vector<Child> ranks;
  for (int rank = 0; rank < 8; ++rank) {
    std::vector<std::string> env = file_env(dir, "ids");
    env.push_back("MEGATRON_OTEL_RANK_STRATEGY=all_ranks");
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("WORLD_SIZE=8");
    ranks.push_back(spawn_probe({"ids", "200"}, env));
  }
  for (const Child& c : ranks) {
    int status = wait_status(c);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::set<std::string> trace_ids, span_ids;
  std::size_t spans = 0;
  for (int rank = 0; rank < 8; ++rank) {
    for (const json& s : read_spans(dir + "/ids/rank" + std::to_string(rank) + ".traces.jsonl")) {
      ++spans;
      span_ids.insert(s["spanId"].get<std::string>());
      if (!s.contains("parentSpanId")) trace_ids.insert(s["traceId"].get<std::string>());
    }
  }
  EXPECT_EQ(spans, 8u * 400u);
  EXPECT_EQ(span_ids.size(), spans);
  EXPECT_EQ(trace_ids.size(), 8u * 200u);
}

// Starts the probe in `mode`, sends SIGTERM once it is ready, and returns its wait status and exported spans.
std::vector<json> spans_after_sigterm(const std::string& mode, int* status) {
  std::string dir = fresh_dir(mode);
  Child c = spawn_probe({mode}, file_env(dir, "term"));
  char buffer[16] = {};
  EXPECT_GT(::read(c.stdout_fd, buffer, sizeof buffer - 1), 0);
  EXPECT_STREQ(buffer, "ready\n");
  ::kill(c.pid, SIGTERM);
  *status = wait_status(c);
  return read_spans(dir + "/term/rank0.traces.jsonl");
}

std::vector<std::string> names_of(const std::vector<json>& spans) {
  std::vector<std::string> names;
  for (const json& s : spans) names.push_back(s["name"].get<std::string>());
  return names;
}

const std::vector<std::string> kEndedBefore = {"before.0", "before.1", "before.2", "before.3", "before.4"};

// No handler of the program's: lens exports, ends the open spans as truncated, then the default action.
TEST(Sigterm, FlushesThenTakesTheDefaultAction) {
  int status = 0;
  std::vector<json> spans = spans_after_sigterm("sigterm", &status);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the default action (terminate) must follow the flush";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  ASSERT_EQ(spans.size(), 7u);
  std::vector<std::string> names = names_of(spans);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 5), kEndedBefore);
  // The open spans were ended at the signal, innermost first, marked truncated.
  EXPECT_EQ(spans[5]["name"], "open.inner");
  EXPECT_EQ(spans[6]["name"], "open.outer");
  EXPECT_TRUE(truncated(spans[5]));
  EXPECT_TRUE(truncated(spans[6]));
  EXPECT_EQ(spans[5]["parentSpanId"], spans[6]["spanId"]);
}

// The program's handler ends the process inside the handler: what had ended was exported before it ran.
TEST(Sigterm, FlushesThenChainsToTheProgramsHandler) {
  int status = 0;
  std::vector<json> spans = spans_after_sigterm("sigterm-user-handler", &status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7) << "the program's own handler must run after lens's";
  EXPECT_EQ(names_of(spans), kEndedBefore);
}

// A program whose handler lets it go on (Megatron saves a last checkpoint) keeps its telemetry: the
// spans open at the signal end normally, and what it records afterwards is exported at exit.
TEST(Sigterm, AProgramThatGoesOnAfterItsHandlerKeepsRecording) {
  int status = 0;
  std::vector<json> spans = spans_after_sigterm("sigterm-user-flag", &status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::vector<std::string> names = names_of(spans);
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 5), kEndedBefore);
  EXPECT_EQ(std::vector<std::string>(names.begin() + 5, names.end()),
            (std::vector<std::string>{"open.inner", "open.outer", "after.signal"}));
  for (const json& s : spans) EXPECT_FALSE(truncated(s)) << s["name"];
}

TEST(Fork, ChildHasTelemetryOffUntilItSetsUpAgainWithFreshIds) {
  std::string dir = fresh_dir("fork");
  lens::Config config = lens::megatron::config_from_env();
  config.enabled = true;
  config.exporter = lens::Exporter::kFile;
  config.file_dir = dir;
  config.run_id = "fork";
  config.span_groups = "all";
  config.rank_strategy = "all_ranks";
  lens::Telemetry parent = lens::setup_telemetry(config, {.rank = 0, .world_size = 2, .reinit = true});
  {
    LENS_SPAN(mg::job, "parent.open_across_fork");
    { LENS_SPAN(mg::step, "parent.before_fork"); }
    pid_t pid = ::fork();
    if (pid == 0) {
      // In the child: nothing recorded, nothing blocks, the inherited handle is inert.
      bool was_on = LENS_GROUP_ENABLED(mg::job);
      { LENS_SPAN(mg::job, "child.ignored"); }
      bool inert = !parent.is_exporting() && parent.shutdown(std::chrono::milliseconds(10));
      lens::Telemetry child = lens::setup_telemetry(config, {.rank = 1, .world_size = 2});
      { LENS_SPAN(mg::job, "child.after_setup"); }
      bool ok = child.is_exporting() && child.shutdown();
      ::_exit(!was_on && inert && ok ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    { LENS_SPAN(mg::step, "parent.after_fork"); }
  }
  ASSERT_TRUE(parent.shutdown());
  std::vector<json> parent_spans = read_spans(dir + "/fork/rank0.traces.jsonl");
  std::vector<json> child_spans = read_spans(dir + "/fork/rank1.traces.jsonl");
  std::set<std::string> parent_names, parent_ids;
  for (const json& s : parent_spans) {
    parent_names.insert(s["name"].get<std::string>());
    parent_ids.insert(s["spanId"].get<std::string>());
  }
  EXPECT_EQ(parent_names,
            (std::set<std::string>{"parent.open_across_fork", "parent.before_fork", "parent.after_fork"}));
  ASSERT_EQ(child_spans.size(), 1u);
  EXPECT_EQ(child_spans[0]["name"], "child.after_setup");
  EXPECT_FALSE(parent_ids.count(child_spans[0]["spanId"].get<std::string>()));
}

}  // namespace
