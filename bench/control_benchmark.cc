// What the live span-group switch (lens/control.h) costs a training loop that never uses it: the poll a consumer
// makes at every iteration boundary (take_span_group_request + at_iteration_boundary with nothing agreed), beside
// an uncontended std::mutex lock and unlock, measured in the same run (the poll takes a mutex twice). And the same
// poll while a thread hammers the control endpoint's GET /status as fast as it answers: the endpoint's thread and
// the training thread share only that mutex, held for a copy of a few words, so the poll must stay in the same
// range; the requests served are counted beside the figure.
//
// Command:  build/bench/lens_control_benchmark --benchmark_repetitions=15 --benchmark_min_time=0.2
//           --benchmark_report_aggregates_only=true   (medians)
// Machine and results: docs/PERFORMANCE.md ("The live span-group switch").
#include <benchmark/benchmark.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench_support.h"
#include "lens/control.h"

namespace {

std::mutex g_baseline_mutex;

void BM_Baseline_UncontendedMutexLockUnlock(benchmark::State& state) {
  for (auto _ : state) {
    g_baseline_mutex.lock();
    benchmark::ClobberMemory();
    g_baseline_mutex.unlock();
  }
}
BENCHMARK(BM_Baseline_UncontendedMutexLockUnlock);

// Telemetry with the control endpoint on; the endpoint's port and token from its file.
struct ControlledJob {
  lens::Telemetry telemetry;
  int port = 0;
  std::string token;
};

ControlledJob& controlled_job() {
  static ControlledJob job = [] {
    lens::Config config;
    config.span_groups = "default";
    config.control = true;
    config.exporter = lens::Exporter::kFile;
    config.file_dir = std::filesystem::temp_directory_path() / ("lens-control-bench-" + std::to_string(::getpid()));
    config.run_id = "bench";
    ControlledJob j{lens::bench::setup_discarding(config)};
    std::ifstream in(std::filesystem::path(config.file_dir) / "bench" / "control.json");
    const nlohmann::json file = nlohmann::json::parse(in);
    j.port = file.at("port").get<int>();
    j.token = file.at("token").get<std::string>();
    return j;
  }();
  return job;
}

void poll_loop(benchmark::State& state) {
  std::int64_t iteration = 0, changes = 0;
  for (auto _ : state) {
    const lens::SpanGroupRequest request = lens::take_span_group_request();
    changes += lens::at_iteration_boundary(++iteration, request).has_value();
  }
  if (changes != 0) state.SkipWithError("nothing was asked, yet the groups changed");
}

void BM_ControlPoll_PerIteration(benchmark::State& state) {
  controlled_job();
  poll_loop(state);
}
BENCHMARK(BM_ControlPoll_PerIteration);

void BM_ControlPoll_PerIteration_WhileStatusIsHammered(benchmark::State& state) {
  ControlledJob& job = controlled_job();
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> served{0};
  std::thread scraper([&] {
    httplib::Client client("127.0.0.1", job.port);
    client.set_bearer_token_auth(job.token);
    client.set_keep_alive(true);
    while (!stop.load(std::memory_order_relaxed))
      if (auto r = client.Get("/status"); r && r->status == 200) served.fetch_add(1, std::memory_order_relaxed);
  });
  // Hammering before the clock starts (at most 5 s: an endpoint that never answers is reported below).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (served.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  poll_loop(state);
  stop.store(true);
  scraper.join();
  state.counters["status_requests_served"] = static_cast<double>(served.load());
  if (served.load() == 0) state.SkipWithError("the scraper was never answered: nothing was measured under load");
}
BENCHMARK(BM_ControlPoll_PerIteration_WhileStatusIsHammered)->UseRealTime();

}  // namespace
