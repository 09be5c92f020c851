// lens's cost inside the reference trainer: one train_step of one rank (the demo model, the 4 layers on one
// stage, 4 micro-batches of 4 x 64 bytes, torch on one thread) per benchmark iteration, with the span groups
// switched at run time between the cases: off (no group), default, per_step, all. Telemetry is set up once as a
// user would (files, every rank exporting), so the export thread's work is in the figures too. Run with
// --benchmark_enable_random_interleaving and repetitions: a slow phase of a shared machine then falls on every
// case alike. The CPU column is the process's CPU time (training thread + lens's export thread): it does not
// count the time a busy host takes the core away. Neither resolves 1 % on a shared VM (both spread by ~15 %), so
// the script also runs each case once under callgrind, counting the instructions of its steps and of the export
// of their telemetry (all threads; torch runs on one): a repeatable figure.
// One rank has no gradient sync and no pipeline transfers: those add a few spans per iteration, not layers' worth.
//
// Command:  ./scripts/trainer_overhead.sh   (12 repetitions of 3 steps per case, interleaved; medians)
// Machine:  AMD EPYC, 2 cores, Debian 12, g++ 12.2 -O2, LibTorch 1.13.1; shared VM, 2026-11-29.
// Results (medians per step; the reading in docs/PERFORMANCE.md, "The reference trainer"):
//   case       wall ms  process CPU ms   instructions (callgrind)   ratio to off
//   off          488        490           5,813,975,251              1
//   default      587        588           5,814,183,876              1.000036
//   per_step     584        584           5,814,071,515              1.000017
//   all          561        564           5,815,104,936              1.000194
// The times spread by ~15 % (coefficient of variation) on this VM and do not resolve the differences; the
// instruction counts are steady to ~0.005 % (a second run: default 1.000000, per_step 1.000002, all 1.000242).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "lens/lens.h"
#include "trainer.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else  // no valgrind headers: the instruction count mode is unavailable, the timed one unchanged
#define RUNNING_ON_VALGRIND 0
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(what)
#endif

namespace {

// The demo's model and batch on one rank.
trainer::Args demo_args() {
  trainer::Args a;
  a.num_layers = 4;
  a.hidden_size = 64;
  a.num_attention_heads = 4;
  a.seq_length = 64;
  a.micro_batch_size = 4;
  a.global_batch_size = 16;
  a.train_iters = 1'000'000;  // the learning-rate schedule stays in its decay; never reached
  return a;
}

// One trainer and its telemetry for every case: a case differs from another only in the enabled groups.
struct Rig {
  trainer::Args args = demo_args();
  std::filesystem::path files =
      std::filesystem::temp_directory_path() / ("lens_trainer_bench_" + std::to_string(getpid()));
  lens::Telemetry telemetry;
  std::unique_ptr<trainer::Parallel> parallel;
  trainer::Corpus corpus;
  std::unique_ptr<trainer::Trainer> trainer;

  Rig() {
    torch::set_num_threads(1);
    lens::Config config = lens::megatron::config_from_env();
    config.enabled = true;
    config.exporter = lens::Exporter::kFile;
    config.file_dir = files.string();
    config.rank_strategy = "all_ranks";
    config.span_groups = "all";
    telemetry = lens::setup_telemetry(config, {.rank = 0, .world_size = 1});
    trainer::Topology topology{0, 1, 1, 1};
    parallel = std::make_unique<trainer::Parallel>(topology, c10::make_intrusive<c10d::HashStore>());
    corpus = trainer::load_corpus("");
    trainer = std::make_unique<trainer::Trainer>(args, *parallel, corpus, telemetry, lens::ResourceAttributes{});
  }
  ~Rig() {
    telemetry.shutdown();
    std::filesystem::remove_all(files);
  }
};

std::unique_ptr<Rig> g_rig;  // made by the first case that runs, ended before exit

Rig& rig() {
  if (!g_rig) g_rig = std::make_unique<Rig>();
  return *g_rig;
}

void BM_TrainStep(benchmark::State& state, const char* groups) {
  Rig& r = rig();
  lens::set_enabled_span_groups(*groups ? lens::resolve(lens::megatron::catalogue(), groups, "the benchmark")
                                        : lens::GroupSet{});
  const lens::SpanContext no_link;
  // Under callgrind: the counts of every thread from here to the dump (the steps and the export of their
  // telemetry) go to a dump of their own, <out-file>.1.
  const bool counting = RUNNING_ON_VALGRIND;
  if (counting) CALLGRIND_ZERO_STATS;
  for (auto _ : state) benchmark::DoNotOptimize(r.trainer->train_step(no_link));
  if (counting) {
    r.telemetry.force_flush();
    CALLGRIND_DUMP_STATS_AT("train steps");
  }
  lens::set_enabled_span_groups(lens::GroupSet{});
}

// Three steps a repetition (Debian's Google Benchmark 1.7 takes no "3x" min-time): one step is ~0.5 s here.
#define LENS_TRAIN_STEP_CASE(name, groups)      \
  BENCHMARK_CAPTURE(BM_TrainStep, name, groups) \
      ->Iterations(3)                           \
      ->MeasureProcessCPUTime()                 \
      ->UseRealTime()                           \
      ->Unit(benchmark::kMillisecond)
LENS_TRAIN_STEP_CASE(off, "");
LENS_TRAIN_STEP_CASE(default, "default");
LENS_TRAIN_STEP_CASE(per_step, "per_step");
LENS_TRAIN_STEP_CASE(all, "all");

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_rig.reset();
  return 0;
}
