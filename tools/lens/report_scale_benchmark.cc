// What `lens report` holds for a run too large for this machine's disk (256 ranks of 10 M spans each, some
// 680 GB of files): the spans of bench/lens_report_benchmark.sh's generated run (its names, a step span in every 30
// spans of a rank) made in memory and handed to the report as its file reader hands them, each thread a report of
// its own over a run of consecutive ranks (a file each) or, `interleaved`, over a part of one Collector's file (every
// rank's batches in the order they arrived), merged in order as Report::read merges them, then the figures made.
// Parsing is left out (its memory is bounded by the blocks in flight, measured by the benchmark script); what grows
// with the run is the report's records, and this measures them at full size.
//
//   report_scale_benchmark RANKS SPANS_PER_RANK [THREADS] [interleaved]
//
// Prints the wall and CPU time, the peak memory and the bytes a rank's iteration held, and checks the figures: every
// iteration of every rank in the step table.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "report.h"

namespace {

constexpr std::array<const char*, 11> kNames = {
    "megatron.layer.self_attention", "megatron.layer.mlp",         "megatron.layer.forward",
    "megatron.microbatch.forward",   "megatron.p2p.send_forward",  "megatron.p2p.recv_backward",
    "megatron.microbatch.backward",  "megatron.p2p.send_backward", "megatron.forward_backward",
    "megatron.grad_sync.finish",     "megatron.optimizer_step"};
constexpr std::uint64_t kSpansPerStep = 30;  // the demo's density, as the benchmark script's generator

lens_tools::Origin origin_of(int rank, int ranks) {
  lens_tools::Origin o;
  o.run_id = "bench";
  o.service = "megatron-lm";
  o.rank = rank;
  o.world_size = ranks;
  o.pid = 1000 + rank;
  return o;
}

// Spans [first, end) of one rank, as the script's generator writes them (the same names, times and iterations).
void read_spans(lens_tools::Report& report, const lens_tools::Origin& origin, std::uint64_t first, std::uint64_t end) {
  lens_tools::SpanRow row;
  row.origin = &origin;
  for (std::uint64_t i = first; i < end; ++i) {
    const std::uint64_t t = 1'700'000'000'000'000'000 + 2000 * i;
    const bool step = i % kSpansPerStep == kSpansPerStep - 1;
    row.name = step ? "megatron.train_step" : kNames[i % kNames.size()];
    row.start_ns = t;
    row.end_ns = t + 1000 + i % 977;
    row.iteration = step ? static_cast<std::int64_t>(i / kSpansPerStep + 1) : -1;
    report.span(row);
  }
}

// Spans [first, end) of ranks [first_rank, end_rank): a file per rank, one after another; or, `interleaved`, as a
// Collector's file holds them: a batch of 512 spans of each rank in turn, the ranks in the order their batches arrived
// (a different order each turn).
void read_ranks(lens_tools::Report& report, const std::vector<lens_tools::Origin>& origins, int first_rank,
                int end_rank, std::uint64_t first, std::uint64_t end, bool interleaved) {
  constexpr std::uint64_t kBatch = 512;
  const std::uint64_t step = interleaved ? kBatch : end - first;
  std::vector<int> order(static_cast<std::size_t>(end_rank - first_rank));
  std::iota(order.begin(), order.end(), first_rank);
  std::mt19937 arrival(7);
  for (std::uint64_t from = first; from < end; from += step) {
    if (interleaved) std::shuffle(order.begin(), order.end(), arrival);
    for (int rank : order)
      read_spans(report, origins[static_cast<std::size_t>(rank)], from, std::min(end, from + step));
  }
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double peak_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s RANKS SPANS_PER_RANK [THREADS] [interleaved]\n", argv[0]);
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  const std::uint64_t spans = std::strtoull(argv[2], nullptr, 10);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const bool interleaved = argc > 4 && std::string(argv[4]) == "interleaved";
  if (ranks < 1 || spans < kSpansPerStep || threads < 1 || threads > ranks) {
    std::fprintf(stderr, "need RANKS >= THREADS >= 1 and SPANS_PER_RANK >= %llu\n",
                 static_cast<unsigned long long>(kSpansPerStep));
    return 2;
  }
  const double baseline_mib = peak_mib();
  std::vector<lens_tools::Origin> origins;
  origins.reserve(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) origins.push_back(origin_of(rank, ranks));

  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  // Each thread a run of consecutive ranks (or a part of one Collector's file) into a report of its own; merged in
  // order (Report::read's way).
  std::vector<lens_tools::Report> reports(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  for (int k = 0; k < threads; ++k)
    workers.emplace_back([&, k] {
      lens_tools::Report& report = reports[static_cast<std::size_t>(k)];
      if (interleaved)  // a part of one Collector's file: every rank's spans of a part of the run's time
        read_ranks(report, origins, 0, ranks, spans * k / threads, spans * (k + 1) / threads, true);
      else  // a run of files, a rank's each
        read_ranks(report, origins, ranks * k / threads, ranks * (k + 1) / threads, 0, spans, false);
    });
  for (std::thread& w : workers) w.join();
  for (std::size_t k = 1; k < reports.size(); ++k) reports[0].merge(std::move(reports[k]));
  reports.resize(1);
  lens_tools::ReadStats stats;
  stats.files = static_cast<std::uint64_t>(ranks);
  stats.spans = spans * static_cast<std::uint64_t>(ranks);
  const lens_tools::Figures figures = reports[0].figures(stats);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double cpu = cpu_seconds() - cpu_start;

  const std::uint64_t iterations = spans / kSpansPerStep;
  const bool every_step = figures.steps.size() == iterations &&
                          std::all_of(figures.steps.begin(), figures.steps.end(),
                                      [&](const auto& s) { return s.ranks == static_cast<std::size_t>(ranks); });
  const double rank_iterations = static_cast<double>(iterations) * ranks;
  const double total = static_cast<double>(stats.spans);
  std::printf(
      "%d ranks x %llu spans (%.1f M spans), %d threads: %.1f s wall, %.1f s CPU, %.2f M spans/s of one core; "
      "peak memory %.1f MiB (%.0f bytes a rank's iteration, %.2f M of them); step table: %zu iterations%s\n",
      ranks, static_cast<unsigned long long>(spans), total / 1e6, threads, wall, cpu, total / cpu / 1e6, peak_mib(),
      (peak_mib() - baseline_mib) * 1048576.0 / rank_iterations, rank_iterations / 1e6, figures.steps.size(),
      every_step ? ", every rank in each" : " -- WRONG: not every iteration of every rank");
  return every_step ? 0 : 1;
}
