// The control endpoint (lens/control.h) in one process: its file, its answers to good and bad requests, and the
// switch at an iteration boundary, `--for N` and the ceiling. The whole job (4 ranks, lens ctl) is tested in
// tools/lens/lens_ctl_test.py.
#include "lens/control.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "control/control.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"

namespace lens {
namespace {

namespace mg = megatron::group;
namespace fs = std::filesystem;

std::string read_regular_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Config control_config(std::string spec = "default") {
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = std::move(spec);
  c.exporter = Exporter::kFile;
  c.file_dir = ::testing::TempDir() + "lens-control-unittest-" + std::to_string(::getpid());
  c.run_id = "control-run";
  c.rank_strategy = "all_ranks";
  c.control = true;
  return c;
}

class Control : public ::testing::Test {
 protected:
  void SetUp() override {
    telemetry_ = setup_telemetry(control_config(), {.rank = 0, .world_size = 4, .reinit = true});
    const fs::path file = fs::path(control_config().file_dir) / "control-run" / "control.json";
    std::ifstream in(file);
    ASSERT_TRUE(in) << file;
    const nlohmann::json j = nlohmann::json::parse(in);
    port_ = j.at("port").get<int>();
    token_ = j.at("token").get<std::string>();
    file_ = file;
  }
  void TearDown() override { setup_telemetry(Config{}, {.reinit = true}).shutdown(); }

  httplib::Result post(const std::string& query, const std::string& token) {
    httplib::Client c("127.0.0.1", port_);
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c.Post("/span-groups?" + query);
  }
  nlohmann::json status() {
    httplib::Client c("127.0.0.1", port_);
    c.set_bearer_token_auth(token_);
    auto r = c.Get("/status");
    EXPECT_TRUE(r && r->status == 200);
    return r ? nlohmann::json::parse(r->body) : nlohmann::json();
  }
  // What a consumer does at a boundary, alone: its own request is what the ranks agree on.
  std::optional<SpanGroupChange> boundary(std::int64_t iteration) {
    return at_iteration_boundary(iteration, take_span_group_request());
  }

  Telemetry telemetry_;
  int port_ = 0;
  std::string token_;
  fs::path file_;
};

TEST_F(Control, TheFileIsTheUsersOnlyAndGoesAtShutdown) {
  struct stat st {};
  ASSERT_EQ(::stat(file_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(token_.size(), 32u);
  telemetry_.shutdown();
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(Control, ASetupThatReplacesThisOneKeepsItsOwnFile) {
  Telemetry second = setup_telemetry(control_config(), {.rank = 0, .world_size = 4, .reinit = true});
  std::ifstream in(file_);
  ASSERT_TRUE(in) << "the first endpoint's shutdown took the second one's file";
  const std::string token = nlohmann::json::parse(in).at("token").get<std::string>();
  EXPECT_NE(token, token_);
  second.shutdown();
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(Control, NoTokenOrAWrongOneIsRefusedAndNothingChanges) {
  const GroupSet before = enabled_span_groups();
  for (const std::string& token : {std::string(), std::string(32, '0'), token_ + "x"}) {
    auto r = post("spec=all", token);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
  }
  httplib::Client c("127.0.0.1", port_);
  EXPECT_EQ(c.Get("/status")->status, 401);
  EXPECT_FALSE(boundary(1));
  EXPECT_EQ(enabled_span_groups(), before);
}

TEST_F(Control, ABadSpecIsRefusedWithTheSetupMessage) {
  auto r = post("spec=default,stepp", token_);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("unknown span group 'stepp'"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("did you mean 'step'"), std::string::npos) << r->body;
  EXPECT_EQ(post("", token_)->status, 400);                     // no spec
  for (const char* empty : {"spec=", "spec=%20", "spec=,,"}) {  // every group off, by mistake: said as '-all'
    auto refused = post(empty, token_);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << empty;
    EXPECT_NE(refused->body.find("ask for '-all'"), std::string::npos) << refused->body;
  }
  EXPECT_EQ(post("spec=all&for=0", token_)->status, 400);  // not a number of iterations
  EXPECT_EQ(post("spec=all&for=three", token_)->status, 400);
  EXPECT_EQ(post("spec=all&for=9223372036854775000", token_)->status, 400);  // would wrap around
  EXPECT_EQ(post("spec=all&for=99999999999999999999", token_)->status, 400);
  EXPECT_EQ(post("spec=all&for=1000000001", token_)->status, 400);
  EXPECT_FALSE(boundary(1));
  EXPECT_FALSE(enabled_span_groups().contains(mg::layer));
}

TEST_F(Control, ASecondChangeWhileOneIsPendingIsRefused) {
  EXPECT_EQ(post("spec=per_step", token_)->status, 202);
  auto second = post("spec=all", token_);
  EXPECT_EQ(second->status, 409);
  EXPECT_NE(second->body.find("pending"), std::string::npos);
  EXPECT_EQ(status()["pending"], "per_step");
  ASSERT_TRUE(boundary(5));
  EXPECT_TRUE(enabled_span_groups().contains(mg::step));
  EXPECT_FALSE(enabled_span_groups().contains(mg::layer));  // per_step, not the refused `all`
  EXPECT_EQ(post("spec=all", token_)->status, 202);         // after the boundary, a new one is taken
}

TEST_F(Control, AChangeAppliesAtTheBoundaryAndForNComesBack) {
  EXPECT_FALSE(enabled_span_groups().contains(mg::step));
  EXPECT_FALSE(boundary(10));  // nothing asked
  ASSERT_EQ(post("spec=all,-layer&for=3", token_)->status, 202);
  EXPECT_FALSE(enabled_span_groups().contains(mg::step));  // not before the boundary
  auto change = boundary(11);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->iteration, 11);
  EXPECT_EQ(change->iterations, 3);
  EXPECT_FALSE(change->restored);
  EXPECT_TRUE(enabled_span_groups().contains(mg::step));
  EXPECT_TRUE(enabled_span_groups().contains(mg::microbatch));
  EXPECT_FALSE(enabled_span_groups().contains(mg::layer));
  EXPECT_EQ(status()["iteration"], 11);
  EXPECT_FALSE(boundary(12));
  EXPECT_FALSE(boundary(13));
  auto back = boundary(14);  // iterations 11, 12, 13 ran with it
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->restored);
  EXPECT_FALSE(enabled_span_groups().contains(mg::step));
  EXPECT_EQ(back->to, change->from);
}

TEST_F(Control, AnAgreedRequestAppliesOnceAndOnlyWithinTheCeiling) {
  // A rank that is not rank 0 gets rank 0's request through the consumer's collective.
  const SpanGroupRequest agreed{7, GroupSet{mg::step, mg::layer}.bits(), 0};
  ASSERT_TRUE(at_iteration_boundary(3, agreed));
  EXPECT_TRUE(enabled_span_groups().contains(mg::layer));
  EXPECT_FALSE(at_iteration_boundary(4, agreed));  // the same id again: nothing new
  EXPECT_EQ(SpanGroupRequest::decode(agreed.encode()).groups, agreed.groups);
  const SpanGroupRequest high{8, std::uint64_t{1} << 63 | 1, 2};
  for (std::int64_t w : high.encode()) EXPECT_GE(w, 0);  // MAX over ranks keeps it
  EXPECT_EQ(SpanGroupRequest::decode(high.encode()).groups, high.groups);
  // A non-exporting rank: its ceiling is empty, so it stays empty.
  Config single = control_config();
  single.rank_strategy = "single_rank";  // rank 3 exports
  single.hang_signal = 0;                // (with hang snapshots, it would keep positions within its spec)
  setup_telemetry(single, {.rank = 1, .world_size = 4, .reinit = true});
  EXPECT_TRUE(at_iteration_boundary(5, SpanGroupRequest{9, GroupSet{mg::step}.bits(), 0}));
  EXPECT_EQ(enabled_span_groups(), GroupSet{});
}

// Words no rank 0 sends (lens ctl bounds --for to 10^9) applied "for 9223372036854775807 iterations", and the
// iteration it would end at overflowed: such a request is refused, and a later one still applies.
TEST_F(Control, AnAgreedRequestPastTheForBoundIsRefused) {
  const GroupSet before = enabled_span_groups();
  for (std::int64_t iterations : {std::int64_t{INT64_MAX}, std::int64_t{1'000'000'001}, std::int64_t{-1}}) {
    static std::int64_t id = 100;
    EXPECT_FALSE(at_iteration_boundary(3, SpanGroupRequest{++id, GroupSet{mg::layer}.bits(), iterations}))
        << iterations;
    EXPECT_EQ(enabled_span_groups(), before) << iterations;
  }
  const auto change = at_iteration_boundary(4, SpanGroupRequest{200, GroupSet{mg::layer}.bits(), 1'000'000'000});
  ASSERT_TRUE(change);
  EXPECT_EQ(change->iterations, 1'000'000'000);
}

// A spec is resolved outside the lock that every training thread takes at an iteration boundary, so a flood of bad
// specs cannot slow the steps. Here resolution waits, in the hook, for a boundary to pass: under the lock the boundary
// could not, and the hook gives up after 2 s.
TEST_F(Control, ASpecIsResolvedOutsideTheLockABoundaryTakes) {
  std::promise<void> entered, passed;
  std::shared_future<void> boundary_passed = passed.get_future().share();
  std::atomic<bool> boundary_passed_meanwhile{false};
  internal::set_spec_resolution_hook_for_testing([&] {
    entered.set_value();
    boundary_passed_meanwhile = boundary_passed.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  });
  std::thread asker([&] { post("spec=per_step", token_); });
  entered.get_future().wait();
  at_iteration_boundary(1, {});
  passed.set_value();
  asker.join();
  internal::set_spec_resolution_hook_for_testing(nullptr);
  EXPECT_TRUE(boundary_passed_meanwhile);
}

// An authenticated flood must not slow the steps. The endpoint answers 20 requests a second (a burst of 40);
// the rest get 429 at once, with no work, and a person's next request a moment later goes through.
TEST_F(Control, AFloodIsAnswered429AndNormalUseGoesOn) {
  httplib::Client c("127.0.0.1", port_);
  c.set_bearer_token_auth(token_);
  int ok = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/status");
    ASSERT_TRUE(r);
    (r->status == 429 ? refused : ok) += 1;
  }
  EXPECT_GE(ok, 40);
  EXPECT_GE(refused, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto r = c.Get("/status");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ControlConfig, TheFileIsInTheRunDirectoryTheTelemetryFilesUse) {
  Config c = control_config();
  c.run_id = "job/7";  // one path component, escaped as the file exporter escapes it
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  EXPECT_TRUE(fs::exists(fs::path(c.file_dir) / "job%2F7" / "control.json"));
  EXPECT_TRUE(fs::exists(fs::path(c.file_dir) / "job%2F7" / "rank0.traces.jsonl"));
  EXPECT_FALSE(fs::exists(fs::path(c.file_dir) / "job"));
  t.shutdown();
}

// control.json replaced while the job runs, by a link to /dev/zero (it filled memory at exit), a FIFO (the rank
// never exited) or a link to a file of someone else's: shutdown reads none of them and removes nothing.
TEST(ControlConfig, AReplacedControlFileIsNeitherReadNorRemovedAtShutdown) {
  const fs::path elsewhere = fs::path(control_config().file_dir) / "someone-elses.json";
  for (const std::string kind : {"link to /dev/zero", "fifo", "link to a file"}) {
    SCOPED_TRACE(kind);
    Config c = control_config();
    Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
    const fs::path file = fs::path(c.file_dir) / "control-run" / "control.json";
    const std::string token = nlohmann::json::parse(std::ifstream(file)).at("token").get<std::string>();
    fs::remove(file);
    if (kind == "fifo") {
      ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    } else if (kind == "link to a file") {
      std::ofstream(elsewhere) << "{\"token\": \"" << token << "\"}\n";  // even one that holds the token
      fs::create_symlink(elsewhere, file);
    } else {
      fs::create_symlink("/dev/zero", file);
    }
    const auto start = std::chrono::steady_clock::now();
    t.shutdown();
    setup_telemetry(Config{}, {.reinit = true}).shutdown();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(fs::exists(fs::symlink_status(file))) << "not removed: it is not the file the rank wrote";
    if (kind == "link to a file") {
      EXPECT_TRUE(fs::exists(elsewhere));
    }
    fs::remove(file);
  }
}

// A second job with the same FILE_DIR and run id must not take control.json over (and remove it at its end, so that
// lens ctl reports the first job, still running, as ended); a run directory planted as a link must not take the token
// elsewhere. Both are refused at setup; a control.json left by a job that has ended is replaced.
TEST(ControlConfig, AnotherLiveJobsFileOrAPlantedRunDirectoryIsRefused) {
  Config c = control_config();
  c.exporter = Exporter::kOtlp;  // the control endpoint makes the run directory itself
  for (OtlpSignalConfig* s : {&c.otlp_traces, &c.otlp_metrics, &c.otlp_logs}) {
    s->protocol = OtlpProtocol::kHttpProtobuf;  // in every build (the sanitizer builds have no gRPC)
    s->endpoint = "http://127.0.0.1:9";
  }
  c.metrics_enabled = false;  // nothing to send to that endpoint: shutdown is quick
  const fs::path run = fs::path(c.file_dir) / "control-run";
  fs::remove_all(run);
  fs::create_directories(run);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto planted = [&](const std::string& owner_host, long pid) {
    std::ofstream(run / "control.json") << "{\"address\": \"127.0.0.1\", \"port\": 1, \"token\": \"t\", \"host\": \""
                                        << owner_host << "\", \"pid\": " << pid << "}\n";
  };
  planted(host, 1);  // pid 1 runs, on this host
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  planted("another-host", 1 << 30);
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  planted(host, (1 << 22) + 12345);  // no such process: a job that has ended
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  EXPECT_NE(read_regular_text(run / "control.json").find(std::to_string(::getpid())), std::string::npos);
  t.shutdown();
  setup_telemetry(Config{}, {.reinit = true}).shutdown();

  fs::remove_all(run);
  const fs::path elsewhere = fs::path(c.file_dir) / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, run);
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  EXPECT_FALSE(fs::exists(elsewhere / "control.json")) << "the token went through the planted link";
  setup_telemetry(Config{}, {.reinit = true}).shutdown();
  fs::remove(run);
}

TEST(ControlConfig, AMalformedAddressIsAnError) {
  Config c = control_config();
  c.control_address = "127.0.0.1:notaport";
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  setup_telemetry(Config{}, {.reinit = true}).shutdown();
}

}  // namespace
}  // namespace lens
