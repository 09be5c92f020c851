// What hang snapshots cost. On the training thread: a span on a non-exporting rank that keeps positions (the
// default since hang snapshots: start and end in the thread's slot, nothing queued), beside the same rank with
// snapshots off (P_HANG_SIGNAL=none, no P_HANG_TIMEOUT: the group check alone) and two steady_clock reads, all in
// the same run; and on an exporting rank under `default` groups, a span of a group that is off kept as a position
// (the loop's groups: step, forward_backward, microbatch, communication). On the export thread, never the training
// thread: one snapshot (open spans of 8 threads, 6 deep, read as a seqlock, and the file written).
//
// Command:  build/bench/lens_hang_benchmark --benchmark_repetitions=15 --benchmark_min_time=0.2
//           --benchmark_report_aggregates_only=true   (medians)
// Machine and results: docs/PERFORMANCE.md ("Hang snapshots").
#include <benchmark/benchmark.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "common/files.h"
#include "hang/snapshot.h"
#include "lens/megatron.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace {

namespace mg = lens::megatron::group;

void BM_Baseline_TwoSteadyClockReads(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  }
}
BENCHMARK(BM_Baseline_TwoSteadyClockReads);

// Rank 0 of 2 (single_rank: rank 1 exports), `per_step` groups.
lens::Telemetry non_exporting_rank(bool snapshots) {
  lens::Config c;
  c.catalogue = lens::megatron::catalogue();
  c.enabled = true;
  c.span_groups = "per_step";
  c.hang_signal = snapshots ? SIGUSR1 : 0;
  c.file_dir = (std::filesystem::temp_directory_path() / "lens-hang-benchmark").string();
  c.run_id = "bench";
  return lens::setup_telemetry(c, {.rank = 0, .world_size = 2, .reinit = true});
}

void BM_Span_NonExportingRank(benchmark::State& state) {
  lens::Telemetry t = non_exporting_rank(state.range(0) != 0);
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", 7});
  }
  t.shutdown();
}
BENCHMARK(BM_Span_NonExportingRank)->ArgName("snapshots")->Arg(1)->Arg(0);

// The exporting rank (rank 1 of 2) under production's `default` groups: a micro-batch span, its group off, is kept
// as a position so that a snapshot knows the loop; with snapshots off the site is the group check alone.
void BM_Span_OffGroupKeptAsPosition(benchmark::State& state) {
  lens::Config c;
  c.catalogue = lens::megatron::catalogue();
  c.enabled = true;
  c.span_groups = "default";
  c.exporter = lens::Exporter::kFile;
  c.metrics_enabled = false;
  c.hang_signal = state.range(0) != 0 ? SIGUSR1 : 0;
  c.file_dir = (std::filesystem::temp_directory_path() / "lens-hang-benchmark").string();
  c.run_id = "bench-positions";
  lens::Telemetry t = lens::setup_telemetry(c, {.rank = 1, .world_size = 2, .reinit = true});
  for (auto _ : state) {
    LENS_SPAN(mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", 1});
  }
  state.counters["exported"] = static_cast<double>(t.span_stats().produced);  // 0: positions are never exported
  t.shutdown();
}
BENCHMARK(BM_Span_OffGroupKeptAsPosition)->ArgName("snapshots")->Arg(1)->Arg(0);

// 8 threads, each 6 spans deep with two attributes, parked while the snapshot is taken and written.
void BM_HangSnapshot_EightThreadsSixDeep(benchmark::State& state) {
  lens::Telemetry t = non_exporting_rank(true);
  std::mutex m;
  std::condition_variable cv;
  int ready = 0;
  bool done = false;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      lens::Span s1(mg::job, "megatron.pretrain", {{"a", 1}, {"b", "x"}});
      lens::Span s2(mg::job, "megatron.train", {{"a", 1}, {"b", "x"}});
      lens::Span s3(mg::step, "megatron.train_step", {{"megatron.iteration", 57}, {"b", "x"}});
      lens::Span s4(mg::forward_backward, "megatron.forward_backward", {{"a", 1}, {"b", "x"}});
      lens::Span s5(mg::step, "megatron.microbatch.forward", {{"megatron.microbatch_id", 2}, {"b", "x"}});
      lens::Span s6(mg::communication, "megatron.p2p.recv_forward", {{"a", 1}, {"b", "x"}});
      std::unique_lock lock(m);
      ++ready;
      cv.notify_all();
      cv.wait(lock, [&] { return done; });
    });
  }
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return ready == 8; });
  }
  lens::internal::HangSettings settings;
  settings.path = (std::filesystem::temp_directory_path() / "lens-hang-benchmark" / "rank0.snapshot.json").string();
  settings.world_size = 2;
  std::filesystem::create_directories(std::filesystem::path(settings.path).parent_path());
  const lens::internal::SpanDrain& spans = *lens::internal::g_span_drain.load();
  for (auto _ : state) {  // what write_hang_snapshot does, without its log line each time
    const std::string text = lens::internal::hang_snapshot_json(settings, spans, "benchmark");
    benchmark::DoNotOptimize(lens::internal::write_file_atomically(settings.path, text, 0600));
  }
  state.counters["open_spans"] = static_cast<double>(spans.open_spans().size());
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_all();
  for (auto& th : threads) th.join();
  t.shutdown();
}
BENCHMARK(BM_HangSnapshot_EightThreadsSixDeep)->Unit(benchmark::kMicrosecond);

}  // namespace
