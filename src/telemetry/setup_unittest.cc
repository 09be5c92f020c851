#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "export/otlp_exporter.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"

namespace lens {
namespace {

namespace mg = megatron::group;

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

Config enabled_megatron(std::string spec = "default") {
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = std::move(spec);
  c.span_groups_source = "MEGATRON_OTEL_SPAN_GROUPS";
  c.exporter = Exporter::kFile;
  c.file_dir = ::testing::TempDir() + "lens-setup-unittest";
  return c;
}

class Setup : public ::testing::Test {
 protected:
  void TearDown() override { setup_telemetry(Config{}, {.reinit = true}).shutdown(); }
};

TEST_F(Setup, ExportingRankEnablesTheResolvedGroups) {
  Telemetry t =
      setup_telemetry(enabled_megatron("per_step"), {.rank = 7, .world_size = 8});  // single_rank: the last rank
  EXPECT_TRUE(t.is_exporting());
  EXPECT_TRUE(is_enabled(mg::step));
  EXPECT_FALSE(is_enabled(mg::layer));
  EXPECT_EQ(t.resolved_span_groups(), megatron::catalogue().find_preset("per_step")->groups);
  EXPECT_EQ(t.ranks(), (RankInfo{7, 8, 0}));
  ASSERT_NE(t.sampler(), nullptr);
  EXPECT_EQ(t.sampler()->description(), "ParentBased{root:AlwaysOnSampler}");
  // The run-time switch works within the catalogue on an exporting rank.
  set_enabled_span_groups(GroupSet{mg::layer});
  EXPECT_TRUE(is_enabled(mg::layer));
  EXPECT_TRUE(t.shutdown());
  EXPECT_FALSE(is_enabled(mg::layer));
  EXPECT_FALSE(t.is_exporting());
  EXPECT_TRUE(t.shutdown());  // idempotent
}

TEST_F(Setup, NonExportingRankWithoutHangSnapshotsHasNoGroupsAndStartsNothing) {
  int threads_before = thread_count();
  Config c = enabled_megatron("all");
  c.hang_signal = 0;  // and no P_HANG_TIMEOUT: nothing to keep positions for
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 8});
  EXPECT_FALSE(t.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty());
  EXPECT_EQ(t.resolved_span_groups(), megatron::catalogue().all());  // resolved all the same
  EXPECT_EQ(t.sampler(), nullptr);
  EXPECT_TRUE(set_enabled_span_groups(GroupSet{mg::job}).empty());
  EXPECT_EQ(thread_count(), threads_before);
}

TEST_F(Setup, DisabledTelemetryHasNoGroupsAndNeedsNoValidSpec) {
  Config c = enabled_megatron("no_such_group");
  c.enabled = false;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  EXPECT_FALSE(t.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty());
}

TEST_F(Setup, SdkDisabledWinsOverEnabled) {
  Config c = enabled_megatron();
  c.sdk_disabled = true;
  EXPECT_FALSE(setup_telemetry(c, {.rank = 0, .world_size = 1}).is_exporting());
}

// export_sample_rate set in code to NaN passed, and the sampled strategy's comparison with it failed on every rank:
// no rank exported, without a word.
TEST_F(Setup, AnExportSampleRateOutsideZeroToOneIsASetupError) {
  for (double bad : {std::nan(""), -0.1, 1.5}) {
    Config c = enabled_megatron();
    c.rank_strategy = "sampled";
    c.export_sample_rate = bad;
    try {
      setup_telemetry(c, {.rank = 0, .world_size = 1});
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("export_sample_rate must be in [0, 1]"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Setup, TracesOffMeansNoGroupsButStillExporting) {
  Config c = enabled_megatron("all");
  c.traces_enabled = false;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1});
  EXPECT_TRUE(t.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty());
  EXPECT_EQ(t.sampler(), nullptr);
}

TEST_F(Setup, ATypoFailsOnEveryRankExportingOrNot) {
  for (int rank : {0, 7}) {
    try {
      setup_telemetry(enabled_megatron("defualt"), {.rank = rank, .world_size = 8});
      FAIL() << rank;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("did you mean 'default'?"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Setup, ADeviceGroupTypoFailsOnEveryRankExportingOrNot) {
  for (int rank : {0, 7}) {
    Config c = enabled_megatron("all");
    c.device_timing = DeviceTiming::kCuda;
    c.device_span_groups = "layers";
    c.device_span_groups_source = "MEGATRON_OTEL_DEVICE_SPAN_GROUPS";
    try {
      setup_telemetry(c, {.rank = rank, .world_size = 8});
      FAIL() << rank;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("MEGATRON_OTEL_DEVICE_SPAN_GROUPS"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("did you mean 'layer'?"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Setup, DoubleInitialisationIsAnErrorUnlessReinit) {
  Telemetry first = setup_telemetry(enabled_megatron("job"), {.rank = 0, .world_size = 1});
  EXPECT_THROW(setup_telemetry(enabled_megatron("step"), {.rank = 0, .world_size = 1}), ConfigError);
  EXPECT_TRUE(first.is_exporting());
  EXPECT_TRUE(is_enabled(mg::job));
  Telemetry second = setup_telemetry(enabled_megatron("step"), {.rank = 0, .world_size = 1, .reinit = true});
  EXPECT_FALSE(first.is_exporting());
  EXPECT_TRUE(second.is_exporting());
  EXPECT_TRUE(is_enabled(mg::step));
  EXPECT_FALSE(is_enabled(mg::job));
  // A shut-down setup may be followed by a fresh one without reinit.
  second.shutdown();
  EXPECT_TRUE(setup_telemetry(enabled_megatron("job"), {.rank = 0, .world_size = 1}).is_exporting());
}

TEST_F(Setup, ABadSettingLeavesTheLiveSetupAsItWas) {
  Telemetry live = setup_telemetry(enabled_megatron("job"), {.rank = 0, .world_size = 1});
  EXPECT_THROW(setup_telemetry(enabled_megatron("jbo"), {.rank = 0, .world_size = 1, .reinit = true}), ConfigError);
  EXPECT_TRUE(live.is_exporting());
  EXPECT_TRUE(is_enabled(mg::job));
}

TEST_F(Setup, ADisabledSetupMayBeRepeated) {
  setup_telemetry(Config{}, {.rank = 0, .world_size = 1});
  EXPECT_NO_THROW(setup_telemetry(enabled_megatron(), {.rank = 0, .world_size = 1}));
}

TEST_F(Setup, StrategiesDecide) {
  Config c = enabled_megatron();
  c.rank_strategy = "first_rank_per_node";
  EXPECT_TRUE(setup_telemetry(c, {.rank = 4, .world_size = 8, .local_rank = 0, .reinit = true}).is_exporting());
  EXPECT_FALSE(setup_telemetry(c, {.rank = 5, .world_size = 8, .local_rank = 1, .reinit = true}).is_exporting());
  c.rank_strategy = "single_rank";
  c.export_rank = 2;
  EXPECT_TRUE(setup_telemetry(c, {.rank = 2, .world_size = 8, .reinit = true}).is_exporting());
}

// EXPORT_RANK at or above the world size would export nothing: every rank refuses it alike.
TEST_F(Setup, AnExportRankTheJobDoesNotHaveIsAnErrorOnEveryRank) {
  Config c = enabled_megatron();
  c.export_rank = 4;
  c.export_rank_source = "MEGATRON_OTEL_EXPORT_RANK";
  for (int rank = 0; rank < 4; ++rank) {
    try {
      setup_telemetry(c, {.rank = rank, .world_size = 4, .reinit = true});
      FAIL() << "rank " << rank << ": no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("MEGATRON_OTEL_EXPORT_RANK=4 is not a rank of this job (world size 4)"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("valid: 0..3"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(enabled_span_groups().empty());
  }
  c.export_rank = 3;
  EXPECT_TRUE(setup_telemetry(c, {.rank = 3, .world_size = 4, .reinit = true}).is_exporting());
  c.rank_strategy = "all_ranks";  // the export rank means nothing to other strategies
  c.export_rank = 9;
  EXPECT_TRUE(setup_telemetry(c, {.rank = 0, .world_size = 4, .reinit = true}).is_exporting());
}

// A control endpoint that cannot start fails setup after the pipeline's thread started: that thread ends with the
// error, rather than run for good with nothing to export.
TEST_F(Setup, ASetupThatFailsLateLeavesNoThreadRunning) {
  const int threads_before = thread_count();
  Config c = enabled_megatron();
  c.control = true;
  c.control_address = "no port";
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1}), ConfigError);
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_TRUE(enabled_span_groups().empty());
}

// The same behind an OTLP endpoint where nothing listens: the failed setup's pipeline has nothing of the job's to
// send, so its end does not wait out the shutdown deadline (5 s) retrying the endpoint before the error is said.
TEST_F(Setup, ASetupThatFailsLateBehindADeadCollectorFailsAtOnce) {
  const int threads_before = thread_count();
  Config c = enabled_megatron();
  c.exporter = Exporter::kOtlp;
  c.otlp_traces.protocol = c.otlp_metrics.protocol = c.otlp_logs.protocol = OtlpProtocol::kHttpProtobuf;
  c.otlp_traces.endpoint = c.otlp_metrics.endpoint = c.otlp_logs.endpoint = "http://127.0.0.1:9";  // refused
  c.control = true;
  c.control_address = "no port";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1}), ConfigError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));  // the deadline was 5 s
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_TRUE(enabled_span_groups().empty());
}

// A sanitizer's runtime maps memory of its own for each thread (ASan: a guarded stack) and dies when a limit on the
// address space refuses it, before std::thread could throw: the test below needs the plain build.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerRuntime = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerRuntime = true;
#else
constexpr bool kSanitizerRuntime = false;
#endif
#else
constexpr bool kSanitizerRuntime = false;
#endif

std::size_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// The soft limit only: a test may raise it again.
void limit_address_space(std::size_t bytes) {
  rlimit limit{};
  ::getrlimit(RLIMIT_AS, &limit);
  limit.rlim_cur = bytes;
  ::setrlimit(RLIMIT_AS, &limit);
}

// Threads that sleep until ended, as many as the process lets start (at most 1000): under a limit on address space,
// they take the room a new thread's stack would need (glibc reuses the stacks of ended threads, so only new ones
// are refused).
class SleepingThreads {
 public:
  SleepingThreads() {
    for (int i = 0; i < 1000; ++i) {
      try {
        threads_.emplace_back([this] {
          while (!end_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
      } catch (const std::system_error&) {
        break;
      }
    }
  }
  ~SleepingThreads() { end(); }
  void end() {
    end_ = true;
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  std::atomic<bool> end_{false};
  std::vector<std::thread> threads_;
};

// A process at its limit on threads (or whose limit on address space leaves no room for a stack) gets a ConfigError
// that names the thread from setup: before, a bare std::system_error. The live setup and the caller's signal mask
// stay as they were. In a child process: it fills its address space with SleepingThreads, then leaves room for
// setup's allocations, not a stack.
TEST_F(Setup, AnExportThreadTheSystemRefusesIsAClearErrorAndTheLiveSetupStays) {
  if (kSanitizerRuntime) GTEST_SKIP() << "a sanitizer's runtime cannot run under a limit on the address space";
  EXPECT_EXIT(
      {
        Telemetry live = setup_telemetry(enabled_megatron("job"), {.rank = 0, .world_size = 1, .reinit = true});
        sigset_t before;
        pthread_sigmask(SIG_SETMASK, nullptr, &before);
        limit_address_space(address_space_in_use() + (std::size_t{1} << 20));
        SleepingThreads sleepers;
        limit_address_space(address_space_in_use() + (std::size_t{6} << 20));  // under a stack (8 MiB)
        int failed = 0;
        try {
          setup_telemetry(enabled_megatron("step"), {.rank = 0, .world_size = 1, .reinit = true});
          failed = 1;
        } catch (const ConfigError& e) {
          if (std::string(e.what()).find("lens: cannot start the export thread") == std::string::npos) failed = 2;
          std::fprintf(stderr, "%s\n", e.what());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
          failed = 3;
        }
        sigset_t after;
        pthread_sigmask(SIG_SETMASK, nullptr, &after);
        if (sigismember(&after, SIGTERM) != sigismember(&before, SIGTERM)) failed = 4;
        if (!live.is_exporting() || !is_enabled(mg::job) || is_enabled(mg::step)) failed = 5;
        sleepers.end();
        std::_Exit(failed);
      },
      ::testing::ExitedWithCode(0), "lens: cannot start the export thread: .*ulimit -u and -v");
}

// The hang watch starts after the export thread, once the live setup has changed: a system that refuses it leaves the
// job exporting without snapshots, with a warning that says so. In a child: SleepingThreads fill the address
// space, then the limit grows a MiB at a time from below a stack until a setup succeeds; the first that does
// had room for the export thread's stack and not for a second one.
TEST_F(Setup, AHangWatchTheSystemRefusesIsAWarningAndTheJobExportsOn) {
  if (kSanitizerRuntime) GTEST_SKIP() << "a sanitizer's runtime cannot run under a limit on the address space";
  EXPECT_EXIT(
      {
        limit_address_space(address_space_in_use() + (std::size_t{1} << 20));
        SleepingThreads sleepers;
        Config c = enabled_megatron("step");
        c.hang_signal = SIGUSR1;  // snapshots on: the hang watch is started
        int failed = 1;           // no setup succeeded
        for (std::size_t mib = 4; mib <= 64; ++mib) {
          limit_address_space(address_space_in_use() + (mib << 20));
          const int threads_before = thread_count();
          std::optional<Telemetry> live;
          try {
            live = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
          } catch (const ConfigError&) {
            continue;  // no room yet for the export thread (or for the file's buffers)
          }
          // Started: the export thread alone (the hang watch refused), and the groups of an exporting rank are on.
          failed = thread_count() == threads_before + 1 && live->is_exporting() && is_enabled(mg::step) ? 0 : 2;
          std::fprintf(stderr, "set up under %zu MiB more; %d threads more\n", mib, thread_count() - threads_before);
          break;
        }
        sleepers.end();
        std::_Exit(failed);
      },
      ::testing::ExitedWithCode(0), "lens: cannot start the hang watch thread: .*rank 0 writes no hang snapshots");
}

// grpc is the default protocol: a build with gRPC sets up (nothing is sent at setup, so no collector is needed);
// a build without it (the sanitizer builds) refuses with a message that names the alternative.
TEST_F(Setup, OtlpOverGrpcWorksOrIsAClearErrorThatNamesHttpProtobuf) {
  Config c = enabled_megatron();
  c.exporter = Exporter::kOtlp;
  // Nothing listens at the default endpoint: the last export at the end gives up at once rather than in 5 s.
  c.otlp_traces.timeout_ms = c.otlp_metrics.timeout_ms = c.otlp_logs.timeout_ms = 100;
  c.metric_export_timeout_ms = c.span_batch.export_timeout_ms = c.log_batch.export_timeout_ms = 100;
  if (internal::otlp_grpc_available()) {
    EXPECT_TRUE(setup_telemetry(c, {.rank = 0, .world_size = 1}).is_exporting());
    return;
  }
  try {
    setup_telemetry(c, {.rank = 0, .world_size = 1});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("http/protobuf"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(enabled_span_groups().empty());
  c.otlp_traces.protocol = c.otlp_metrics.protocol = c.otlp_logs.protocol = OtlpProtocol::kHttpProtobuf;
  EXPECT_TRUE(setup_telemetry(c, {.rank = 0, .world_size = 1}).is_exporting());
}

TEST_F(Setup, AnUnreadableOtlpCertificateIsASetupErrorNamingTheFile) {
  for (OtlpProtocol protocol : {OtlpProtocol::kHttpProtobuf, OtlpProtocol::kGrpc}) {
    if (protocol == OtlpProtocol::kGrpc && !internal::otlp_grpc_available()) continue;
    Config c = enabled_megatron();
    c.exporter = Exporter::kOtlp;
    c.otlp_traces.protocol = c.otlp_metrics.protocol = c.otlp_logs.protocol = protocol;
    c.otlp_traces.endpoint = "https://localhost:4317";
    c.otlp_traces.certificate = "/nonexistent/ca.pem";
    try {
      setup_telemetry(c, {.rank = 0, .world_size = 1});
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent/ca.pem"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CERTIFICATE"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(enabled_span_groups().empty());
  }
}

TEST_F(Setup, AnUnwritableFileDirIsASetupError) {
  Config c = enabled_megatron();
  c.file_dir = "/proc/lens-cannot-write-here";
  EXPECT_THROW(setup_telemetry(c, {.rank = 0, .world_size = 1}), ConfigError);
}

TEST_F(Setup, AnInertHandleIsHarmless) {
  Telemetry t;
  EXPECT_FALSE(t.is_exporting());
  EXPECT_TRUE(t.shutdown());
  EXPECT_FALSE(t.config().enabled);
  EXPECT_EQ(t.sampler(), nullptr);
}

}  // namespace
}  // namespace lens
