// Hang snapshots in one process: what rank<R>.snapshot.json says of the open spans of every thread (names, groups,
// parentage, attributes, the last iteration), on the signal and from the watchdog, on an exporting rank and on a
// rank that only keeps positions. The whole job (4 ranks, a stalled one, SIGSTOP, lens hang) is tested in
// tools/lens/lens_hang_test.py.
#include "hang/snapshot.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/process_identity.h"
#include "lens/control.h"
#include "lens/megatron.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace lens {
namespace {

namespace mg = megatron::group;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kRunId = "hang-run";

Config hang_config(const std::string& test) {
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = "all";
  c.exporter = Exporter::kFile;
  c.metrics_enabled = false;
  c.file_dir = ::testing::TempDir() + "lens-hang-unittest-" + std::to_string(::getpid()) + "-" + test;
  c.run_id = kRunId;
  return c;
}

fs::path run_dir(const Config& c) { return fs::path(c.file_dir) / kRunId; }

// The snapshot at `path` once it is there (null after `wait`).
nlohmann::json wait_for_snapshot(const fs::path& path, std::chrono::milliseconds wait = 10s) {
  for (auto until = std::chrono::steady_clock::now() + wait; std::chrono::steady_clock::now() < until;) {
    if (std::ifstream in(path); in) return nlohmann::json::parse(in);
    std::this_thread::sleep_for(10ms);
  }
  return nullptr;
}

// A thread inside a step and one of its micro-batches until told to go on.
class StuckThread {
 public:
  StuckThread() {
    thread_ = std::thread([this] {
      tid_.set_value(::gettid());
      ScopedSpan step;
      step.start(mg::step, "megatron.train_step", {{"iteration", 57}});
      Span forward(mg::microbatch, "megatron.microbatch.forward", {{"microbatch", 2}, {"stage", "first"}});
      step_ids_.set_value({step.context().span_id, forward.context().span_id});
      go_on_.get_future().wait();
    });
    tid = tid_.get_future().get();
    ids = step_ids_.get_future().get();
  }
  ~StuckThread() {
    go_on_.set_value();
    thread_.join();
  }
  pid_t tid;
  std::pair<SpanId, SpanId> ids;  // the step's, the forward's

 private:
  std::promise<pid_t> tid_;
  std::promise<std::pair<SpanId, SpanId>> step_ids_;
  std::promise<void> go_on_;
  std::thread thread_;
};

std::string hex(const SpanId& id) {
  std::string out;
  char two[3];
  for (auto b : id.bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

const nlohmann::json* thread_of(const nlohmann::json& snapshot, pid_t tid) {
  for (const auto& t : snapshot.at("threads"))
    if (t.at("tid") == tid) return &t;
  return nullptr;
}

// `positions`: the rank exports nothing, so its spans are positions, with no ids.
void expect_stuck_thread(const nlohmann::json& snapshot, const StuckThread& stuck, bool positions = false) {
  const nlohmann::json* t = thread_of(snapshot, stuck.tid);
  ASSERT_NE(t, nullptr) << snapshot.dump();
  const auto& spans = t->at("open_spans");
  ASSERT_EQ(spans.size(), 2u) << t->dump();
  EXPECT_EQ(spans[0].at("name"), "megatron.train_step");  // outermost first
  EXPECT_EQ(spans[0].at("group"), "step");
  EXPECT_EQ(spans[0].at("attributes").at("iteration"), 57);
  if (positions) {
    for (const auto& span : spans) {
      EXPECT_EQ(span.at("position_only"), true);
      EXPECT_TRUE(span.at("span_id").is_null());
      EXPECT_TRUE(span.at("parent_span_id").is_null());
    }
  } else {
    EXPECT_EQ(spans[0].at("span_id"), hex(stuck.ids.first));
    EXPECT_EQ(spans[1].at("parent_span_id"), hex(stuck.ids.first));
    EXPECT_EQ(spans[1].at("span_id"), hex(stuck.ids.second));
  }
  EXPECT_EQ(spans[1].at("name"), "megatron.microbatch.forward");
  EXPECT_EQ(spans[1].at("group"), "microbatch");
  EXPECT_EQ(spans[1].at("attributes").at("microbatch"), 2);
  EXPECT_EQ(spans[1].at("attributes").at("stage"), "first");
  EXPECT_GE(spans[1].at("start_unix_nano").get<std::uint64_t>(), spans[0].at("start_unix_nano").get<std::uint64_t>());
  EXPECT_GE(spans[0].at("open_seconds").get<double>(), 0.0);
}

class HangSnapshot : public ::testing::Test {
 protected:
  void TearDown() override {
    setup_telemetry(Config{}, {.reinit = true}).shutdown();
    fs::remove_all(::testing::TempDir() + "lens-hang-unittest-" + std::to_string(::getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
};

TEST_F(HangSnapshot, TheSignalWritesEveryThreadsOpenSpans) {
  const Config c = hang_config("TheSignalWritesEveryThreadsOpenSpans");
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  ASSERT_TRUE(t.is_exporting());
  ASSERT_FALSE(at_iteration_boundary(57, {}));
  StuckThread stuck;
  Span mine(mg::job, "megatron.job");
  // A link planted where the temporary file goes is not followed: what it points to stays as it was.
  const fs::path victim = fs::path(c.file_dir) / "victim";
  std::ofstream(victim) << "untouched";
  fs::create_symlink(victim, run_dir(c) / "rank0.snapshot.json.tmp");
  ASSERT_EQ(::raise(SIGUSR1), 0);  // the handler only asks: the process goes on
  const nlohmann::json s = wait_for_snapshot(run_dir(c) / "rank0.snapshot.json");
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s.at("lens_hang_snapshot"), 1);
  EXPECT_EQ(s.at("rank"), 0);
  EXPECT_EQ(s.at("world_size"), 1);
  EXPECT_EQ(s.at("pid"), ::getpid());
  EXPECT_EQ(s.at("run_id"), kRunId);
  EXPECT_EQ(s.at("reason"), "signal");
  EXPECT_EQ(s.at("exporting"), true);
  EXPECT_EQ(s.at("last_iteration_completed"), 56);
  EXPECT_GE(s.at("seconds_since_iteration_boundary").get<double>(), 0.0);
  expect_stuck_thread(s, stuck);
  const nlohmann::json* main_thread = thread_of(s, ::gettid());
  ASSERT_NE(main_thread, nullptr);
  EXPECT_EQ(main_thread->at("open_spans").size(), 1u);
  EXPECT_EQ(main_thread->at("open_spans")[0].at("parent_span_id"), nullptr);
  EXPECT_FALSE(fs::exists(fs::symlink_status(run_dir(c) / "rank0.snapshot.json.tmp")));
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "untouched");
  // Private as the telemetry files are: it names hosts and what the job does.
  EXPECT_EQ(fs::status(run_dir(c) / "rank0.snapshot.json").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
}

// The snapshot has a thread of its own: written by the export thread, it would wait behind an export in progress
// (a minute with a collector that hangs), and lens hang would then name the healthy exporting rank.
TEST_F(HangSnapshot, TheSignalIsAnsweredWithinASecondWhileAnExportHangs) {
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);  // a collector that takes the connection and never answers
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length), 0);
  Config c = hang_config("TheSignalIsAnsweredWithinASecondWhileAnExportHangs");
  c.exporter = Exporter::kOtlp;
  for (OtlpSignalConfig* s : {&c.otlp_traces, &c.otlp_metrics, &c.otlp_logs}) {
    s->protocol = OtlpProtocol::kHttpProtobuf;
    s->endpoint = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    s->timeout_ms = 60000;
  }
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  { Span sent(mg::job, "megatron.sent"); }
  EXPECT_FALSE(t.force_flush(std::chrono::milliseconds(300)));  // the export thread now waits for an answer
  StuckThread stuck;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const nlohmann::json s = wait_for_snapshot(run_dir(c) / "rank0.snapshot.json", 1s);
  ASSERT_FALSE(s.is_null()) << "no snapshot within a second of the signal";
  expect_stuck_thread(s, stuck);
  t.shutdown(std::chrono::milliseconds(100));
  ::close(silent);
}

TEST_F(HangSnapshot, TheWatchdogFiresOnceWhenNoIterationBoundaryCameInTime) {
  Config c = hang_config("TheWatchdogFiresOnceWhenNoIterationBoundaryCameInTime");
  c.hang_signal = 0;
  c.hang_timeout_ms = 300;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  const fs::path file = run_dir(c) / "rank0.snapshot.json";
  // Not armed before the first boundary (startup may take long), nor while boundaries come in time.
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(fs::exists(file));
  for (int i = 1; i <= 8; ++i) {
    at_iteration_boundary(i, {});
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_FALSE(fs::exists(file));
  StuckThread stuck;  // iteration 8 never ends
  const nlohmann::json s = wait_for_snapshot(file);
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s.at("reason"), "watchdog");
  EXPECT_EQ(s.at("last_iteration_completed"), 7);
  EXPECT_GE(s.at("seconds_since_iteration_boundary").get<double>(), 0.3);
  EXPECT_EQ(s.at("hang_timeout_seconds"), 0.3);
  expect_stuck_thread(s, stuck);
  // Once per stall: removed, it is not written again until a boundary comes and another stall follows.
  fs::remove(file);
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(fs::exists(file));
  at_iteration_boundary(9, {});
  EXPECT_FALSE(wait_for_snapshot(file).is_null());
}

TEST_F(HangSnapshot, ANonExportingRankKeepsOnlyPositionsAndExportsNothing) {
  const Config c = hang_config("ANonExportingRankKeepsOnlyPositionsAndExportsNothing");  // single_rank: rank 3
  Telemetry t = setup_telemetry(c, {.rank = 1, .world_size = 4});
  ASSERT_FALSE(t.is_exporting());
  EXPECT_EQ(t.sampler(), nullptr);
  EXPECT_FALSE(is_enabled(mg::layer));         // it exports nothing: nothing is enabled
  EXPECT_TRUE(LENS_GROUP_ENABLED(mg::layer));  // yet its spans start, for their position
  { Span ended(mg::step, "ended"); }
  at_iteration_boundary(3, {});
  StuckThread stuck;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const nlohmann::json s = wait_for_snapshot(run_dir(c) / "rank1.snapshot.json");
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(fs::status(run_dir(c)).permissions(), fs::perms::owner_all);  // made 0700, as the file exporter does
  EXPECT_EQ(s.at("rank"), 1);
  EXPECT_EQ(s.at("world_size"), 4);
  EXPECT_EQ(s.at("exporting"), false);
  expect_stuck_thread(s, stuck, /*positions=*/true);
  EXPECT_EQ(t.span_stats().produced, 0u);
  EXPECT_TRUE(t.shutdown());
  for (const auto& entry : fs::directory_iterator(run_dir(c)))  // the snapshot; the process record went at shutdown
    EXPECT_EQ(entry.path().filename(), "rank1.snapshot.json");
}

// `lens hang RUN_DIR --signal` signals the processes the run recorded: each rank says who it is while it
// runs (its pid, and what tells that pid's process apart from a later one), and takes it back at shutdown.
TEST_F(HangSnapshot, EachRankRecordsItsProcessWhileItRuns) {
  Config c = hang_config("EachRankRecordsItsProcessWhileItRuns");
  c.hang_signal = SIGUSR2;
  Telemetry t = setup_telemetry(c, {.rank = 2, .world_size = 4});
  const nlohmann::json r = wait_for_snapshot(run_dir(c) / "rank2.process.json");  // written by the hang thread
  ASSERT_FALSE(r.is_null());
  const internal::ProcessIdentity me = internal::process_identity(::getpid()).value();
  EXPECT_EQ(r.at("lens_rank_process"), 1);
  EXPECT_EQ(r.at("rank"), 2);
  EXPECT_EQ(r.at("pid"), ::getpid());
  EXPECT_EQ(r.at("run_id"), kRunId);
  EXPECT_EQ(r.at("boot_id"), me.boot_id);
  EXPECT_EQ(r.at("start_ticks"), me.start_ticks);
  EXPECT_EQ(r.at("comm"), me.comm);
  EXPECT_EQ(r.at("hang_signal"), "SIGUSR2");
  EXPECT_EQ(r.at("uid"), ::getuid());  // `lens hang --signal` signals only a process of the record's owner
  EXPECT_EQ(r.at("pid_namespace"), internal::this_pid_namespace().value());  // and only in its own namespace
  EXPECT_EQ(fs::status(run_dir(c) / "rank2.process.json").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(t.shutdown());
  EXPECT_FALSE(fs::exists(run_dir(c)));  // the record gone, and the directory it alone was in
}

// Under production's `default` groups nothing below megatron.train is exported, yet a snapshot must say
// where in the loop each rank is: step, forward-backward, micro-batch and communication are kept as positions.
TEST_F(HangSnapshot, UnderDefaultGroupsTheLoopIsKeptAsPositionsAndNotExported) {
  Config c = hang_config("UnderDefaultGroupsTheLoopIsKeptAsPositionsAndNotExported");
  c.span_groups = "default";
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  ASSERT_TRUE(t.is_exporting());
  EXPECT_FALSE(enabled_span_groups().contains(mg::step));
  EXPECT_FALSE(is_enabled(mg::layer));  // not a position group: off is off
  StuckThread stuck;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const nlohmann::json s = wait_for_snapshot(run_dir(c) / "rank0.snapshot.json");
  ASSERT_FALSE(s.is_null());
  const nlohmann::json* thread = thread_of(s, stuck.tid);
  ASSERT_NE(thread, nullptr) << s.dump();
  const auto& spans = thread->at("open_spans");
  ASSERT_EQ(spans.size(), 2u) << thread->dump();
  EXPECT_EQ((std::pair{spans[0].at("name"), spans[0].at("group")}),
            (std::pair{nlohmann::json("megatron.train_step"), nlohmann::json("step")}));
  EXPECT_EQ(spans[1].at("group"), "microbatch");
  EXPECT_EQ(spans[1].at("attributes").at("microbatch"), 2);
  for (const auto& span : spans) {
    EXPECT_EQ(span.at("position_only"), true);
    EXPECT_TRUE(span.at("span_id").is_null());
  }
  EXPECT_TRUE(t.shutdown());
  EXPECT_EQ(t.span_stats().produced, 0u);  // nothing of the loop was exported
}

TEST_F(HangSnapshot, AnUnwritableDirectoryIsAWarningNotACrash) {
  Config c = hang_config("AnUnwritableDirectoryIsAWarningNotACrash");
  c.exporter = Exporter::kConsole;
  c.traces_enabled = true;
  fs::create_directories(c.file_dir);
  std::ofstream(run_dir(c)) << "a file where the run directory would be\n";
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  StuckThread stuck;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(fs::is_regular_file(run_dir(c)));
  Span after(mg::job, "still recording");
  EXPECT_TRUE(after.context().is_valid());
}

}  // namespace
}  // namespace lens
