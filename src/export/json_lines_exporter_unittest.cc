// The file exporter against a hostile run id and file system: the run directory is always one component inside
// FILE_DIR, files are private and never opened through a symlink, a torn last line is never extended, and a file
// deleted mid-run is made again.
#include "export/json_lines_exporter.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lens/log.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"

namespace lens {
namespace {

namespace fs = std::filesystem;
namespace mg = megatron::group;

class FileExporter : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("lens-file-exporter-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "telemetry");
  }
  void TearDown() override {
    setup_telemetry(Config{}, {.reinit = true}).shutdown();
    fs::remove_all(root_);
  }
  Config config(const std::string& run_id = "run-1") const {
    Config c;
    c.catalogue = megatron::catalogue();
    c.enabled = true;
    c.span_groups = "default";
    c.metrics_enabled = false;
    c.exporter = Exporter::kFile;
    c.file_dir = (root_ / "telemetry").string();
    c.run_id = run_id;
    return c;
  }
  static std::vector<std::string> lines(const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  fs::path root_;
};

// OTEL_<SIGNAL>_EXPORTER overrides EXPORTER for its signal; `none` turns the signal off.
TEST_F(FileExporter, ASignalsOwnExporterVariableSendsItElsewhereOrNowhere) {
  Config c = config("signals");
  c.logs_enabled = true;
  c.metrics_enabled = true;
  c.metric_export_interval_ms = 60000;
  c.traces_exporter = SignalExporter::kNone;
  c.logs_exporter = SignalExporter::kConsole;
  ::testing::internal::CaptureStdout();
  {
    Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
    EXPECT_FALSE(is_enabled(mg::job)) << "traces are off: no group is enabled";
    LENS_SPAN(mg::job, "never recorded");
    lens::log(Severity::kWarn, "to the console");
    t.shutdown();
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  const fs::path run = root_ / "telemetry" / "signals";
  EXPECT_FALSE(fs::exists(run / "rank0.traces.jsonl")) << "OTEL_TRACES_EXPORTER=none";
  EXPECT_FALSE(fs::exists(run / "rank0.logs.jsonl")) << "logs went to the console";
  ASSERT_TRUE(fs::exists(run / "rank0.metrics.jsonl")) << "metrics follow EXPORTER=file";
  EXPECT_NE(out.find("to the console"), std::string::npos) << out;
  EXPECT_NE(out.find("\"resourceLogs\""), std::string::npos) << out;
  EXPECT_EQ(out.find("never recorded"), std::string::npos) << out;
  EXPECT_EQ(out.find("resourceMetrics"), std::string::npos) << out;
}

TEST_F(FileExporter, TheRunDirectoryIsOneSafeComponent) {
  EXPECT_EQ(internal::run_directory_name("slurm-123.4_a"), "slurm-123.4_a");
  EXPECT_EQ(internal::run_directory_name("../x"), "%2E.%2Fx");
  EXPECT_EQ(internal::run_directory_name(".."), "%2E.");
  EXPECT_EQ(internal::run_directory_name("/etc/cron.d"), "%2Fetc%2Fcron.d");
  EXPECT_EQ(internal::run_directory_name("a b\n"), "a%20b%0A");
  EXPECT_THROW(internal::run_directory_name(std::string(300, 'x')), ConfigError);
  for (const char* hostile : {"../../escaped", "/tmp/absolute", "..", "."}) {
    Telemetry t = setup_telemetry(config(hostile), {.rank = 0, .world_size = 1, .reinit = true});
    { LENS_SPAN(mg::job, "kept"); }
    ASSERT_TRUE(t.shutdown());
    std::vector<fs::path> made;
    for (const auto& entry : fs::recursive_directory_iterator(root_)) made.push_back(entry.path());
    fs::path expected = root_ / "telemetry" / internal::run_directory_name(hostile) / "rank0.traces.jsonl";
    EXPECT_TRUE(fs::exists(expected)) << hostile;
    EXPECT_FALSE(fs::exists(root_ / "escaped")) << hostile;
    for (const fs::path& p : made) EXPECT_EQ(p.string().rfind((root_ / "telemetry").string(), 0), 0u) << p;
  }
}

TEST_F(FileExporter, FilesArePrivateAndNoSymlinkIsFollowed) {
  {
    Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
    { LENS_SPAN(mg::job, "kept"); }
    ASSERT_TRUE(t.shutdown());
  }
  struct stat st {};
  ASSERT_EQ(::stat((root_ / "telemetry/run-1/rank0.traces.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((root_ / "telemetry/run-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  fs::create_directories(root_ / "telemetry/run-2");
  std::ofstream(root_ / "victim") << "untouched\n";
  fs::create_symlink(root_ / "victim", root_ / "telemetry/run-2/rank0.traces.jsonl");
  try {
    setup_telemetry(config("run-2"), {.rank = 0, .world_size = 1, .reinit = true});
    ADD_FAILURE() << "a planted symlink was followed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lines(root_ / "victim"), std::vector<std::string>{"untouched"});

  fs::create_directories(root_ / "elsewhere");  // a symlink in place of the run directory
  fs::create_directory_symlink(root_ / "elsewhere", root_ / "telemetry/run-3");
  EXPECT_THROW(setup_telemetry(config("run-3"), {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  EXPECT_TRUE(fs::is_empty(root_ / "elsewhere"));
}

// A run directory that is there already, writable by everyone (0777), would let anyone replace what lens writes
// there. Ours is made 0700; another user's is refused.
TEST_F(FileExporter, AnExistingRunDirectoryIsMadePrivateOrRefused) {
  fs::create_directories(root_ / "telemetry/run-open");
  fs::permissions(root_ / "telemetry/run-open", fs::perms::all);
  setup_telemetry(config("run-open"), {.rank = 0, .world_size = 1, .reinit = true}).shutdown();
  struct stat st {};
  ASSERT_EQ(::stat((root_ / "telemetry/run-open").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  if (::geteuid() != 0) GTEST_SKIP() << "handing a directory to another user needs root";
  fs::create_directories(root_ / "telemetry/run-theirs");
  ASSERT_EQ(::chown((root_ / "telemetry/run-theirs").c_str(), 65534, 65534), 0);
  try {
    setup_telemetry(config("run-theirs"), {.rank = 0, .world_size = 1, .reinit = true});
    ADD_FAILURE() << "another user's run directory was used";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run-theirs"), std::string::npos) << e.what();
  }
  setup_telemetry(Config{}, {.reinit = true}).shutdown();
}

// A requeued job with the same run id appends to a file whose last line an earlier SIGKILL cut: the new lines
// must not extend the torn one (every span in them would be lost to a JSON reader).
TEST_F(FileExporter, ATornLastLineIsNeverExtended) {
  fs::create_directories(root_ / "telemetry/run-1");
  std::ofstream(root_ / "telemetry/run-1/rank0.traces.jsonl") << R"({"resourceSpans":[{"resource":)";
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "after-the-tear"); }
  ASSERT_TRUE(t.shutdown());
  std::vector<std::string> got = lines(root_ / "telemetry/run-1/rank0.traces.jsonl");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(nlohmann::json::accept(got[0]));
  ASSERT_TRUE(nlohmann::json::accept(got[1])) << got[1];
  EXPECT_NE(got[1].find("after-the-tear"), std::string::npos);
}

// A write cut short, as by a full disk (here by RLIMIT_FSIZE): the batch is counted as failed, the torn line stays
// a line of its own, and the next batch is a whole line again.
TEST_F(FileExporter, AWriteCutShortIsCountedAndTheNextLineStartsClean) {
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "before"); }
  ASSERT_TRUE(t.force_flush());
  fs::path file = root_ / "telemetry/run-1/rank0.traces.jsonl";
  rlimit before{}, cut{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  cut = before;
  cut.rlim_cur = static_cast<rlim_t>(fs::file_size(file)) + 64;  // room for 64 bytes of the next line
  auto previous = std::signal(SIGXFSZ, SIG_IGN);                 // else the kernel ends the process
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &cut), 0);
  { LENS_SPAN(mg::job, "cut", {"padding", std::string(200, 'x')}); }
  t.force_flush();
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  std::string log = ::testing::internal::GetCapturedStderr();
  { LENS_SPAN(mg::job, "after"); }
  ASSERT_TRUE(t.shutdown());
  std::vector<std::string> got = lines(file);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(nlohmann::json::accept(got[0]));
  EXPECT_FALSE(nlohmann::json::accept(got[1]));
  EXPECT_EQ(got[1].size(), 64u);
  ASSERT_TRUE(nlohmann::json::accept(got[2])) << got[2];
  EXPECT_NE(got[2].find("after"), std::string::npos);
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported, 2u);
  EXPECT_NE(log.find("cannot write telemetry"), std::string::npos) << log;
}

TEST_F(FileExporter, AFileDeletedMidRunIsMadeAgain) {
  Telemetry t = setup_telemetry(config(), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "first"); }
  ASSERT_TRUE(t.force_flush());
  fs::path file = root_ / "telemetry/run-1/rank0.traces.jsonl";
  fs::remove(file);
  ::testing::internal::CaptureStderr();
  { LENS_SPAN(mg::job, "second"); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> got = lines(file);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("second"), std::string::npos);
  EXPECT_NE(log.find("was deleted"), std::string::npos) << log;
  EXPECT_EQ(t.span_stats().exported, 2u);
}

}  // namespace
}  // namespace lens
