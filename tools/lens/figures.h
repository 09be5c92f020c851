// The figures of `lens report` (CONTRACT §10), typed: what Report::figures computes and what the text form
// (text.cc), the HTML page (html.cc) and `--fail-if` (main.cc) read. They become JSON in one place only,
// figures_json() for `--json`.
//
//   const Figures f = report.figures(read);
//   if (!f.stragglers.named.empty()) std::printf("rank %d\n", f.stragglers.named.front().rank);
//   std::cout << figures_json(f).dump(2);
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "run_reader.h"
#include "span_kinds.h"

namespace lens_tools {

// A figure that may be missing: not measured, or not a number in the files. null in JSON, "-" in text.
using Figure = std::optional<double>;
inline Figure figure_of(double v) { return std::isnan(v) ? Figure{} : Figure{v}; }

// Who wrote the run.
struct RunFigures {
  std::set<std::string> run_ids, services;
  std::set<int> ranks;
  int world_size = 0, tensor_parallel_size = 0, pipeline_parallel_size = 0, data_parallel_size = 0;
};

// The GPU's time for one span name (its `<name>.device` spans, docs/GPU.md) over all ranks.
struct DeviceTimeFigures {
  std::uint64_t count = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
};

// One span name over all ranks: its host time, and beside it the device's where the span was device-timed.
struct SpanFigures {
  std::string name;
  std::uint64_t count = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
  std::optional<DeviceTimeFigures> device;
  Figure launch_overhead_ms;  // host mean - device mean: positive where the host is slower than the GPU it feeds
};

// One iteration over the ranks that have its step span.
struct StepFigures {
  std::int64_t iteration = 0;
  std::size_t ranks = 0;
  double median_ms = 0, max_ms = 0;
  int slowest_rank = -1;
};

// The mean step of one rank, or of all: its phases (none where not measured) and the rest.
struct PhaseRow {
  double steps = 0, step_ms = 0;
  std::array<Figure, kPhaseCount> phase_ms{};
  double other_ms = 0;
  // The device time of the phase's device spans (by the step their start falls in; none where no device span of
  // the phase was read), and the host's time less it where both exist.
  std::array<Figure, kPhaseCount> device_phase_ms{}, launch_overhead_ms{};
};

struct PhaseFigures {
  PhaseRow mean_per_step;
  std::map<int, PhaseRow> per_rank;
  std::array<std::string, kPhaseCount> not_measured;  // why a phase has no figure; empty where it has one
};

// How `lens report` applies the job's straggler rule (src/watch/straggler_rule.h, CONTRACT §10): over windows of
// kWindowSteps iterations aligned as STRAGGLER_INTERVAL's default (1-20, 21-40, ...), each rank's median compute and
// wait against its stage peers'; a rank is named when the windows that flag it hold more than kShare of its scored
// steps.
struct StragglerRule {
  static constexpr std::int64_t kWindowSteps = 20;
  static constexpr double kShare = 0.5;
};

// One rank's compute against its stage peers' (StragglerRule), over the windows in which it was scored.
struct StragglerRow {
  int rank = 0, stage = 0, steps_scored = 0, steps_flagged = 0;  // steps of its scored and of its flagged windows
  double share = 0;
  Figure score;  // median over windows of compute / peers' compute
  Figure compute_ms_median, stage_compute_ms_median, wait_ms_median, stage_wait_ms_median;  // stage: its peers'
};

struct StragglerFigures {
  std::vector<StragglerRow> ranks, named;  // named: flagged windows hold more than StragglerRule::kShare of its steps
  // Stages with a rank alone at its tensor-parallel position (no data-parallel replica): no peer to compare with.
  std::vector<int> unscored_stages;
  std::string not_scored;  // why no rank was scored; empty when they were
};

// How much of the job's wall time trained (CONTRACT §10): the step spans of the iterations that count, beside where
// the rest went. One rank's timeline (the lowest with steps; every rank's step is about as long), over all its
// processes: a relaunch after a failure is another process, and an iteration it runs again was redone.
struct GoodputFigures {
  int rank = -1;     // whose timeline
  int attempts = 0;  // its processes that trained (1: no restart)
  std::int64_t redone_iterations = 0;
  double wall_s = 0;                // first to last span of its processes, gaps between them included
  double goodput_s = 0, share = 0;  // the last run of each iteration's step span; share of wall
  double startup_s = 0;             // each process's start to its first step (data, model, checkpoint load)
  double checkpoint_s = 0;          // saves on the training thread
  double evaluation_s = 0;
  double restarts_s = 0;     // between one process's last span and the next one's first
  double redone_s = 0;       // steps of iterations run again later
  double other_s = 0;        // the rest: logging, gaps between steps
  std::string not_measured;  // why there is no figure (no step spans); empty when there is
};

// One pipeline stage's bubble beside 1F1B's (P - 1) / (M + P - 1).
struct BubbleRow {
  int stage = 0;
  std::size_t steps = 0;
  Figure microbatches, measured, theoretical;
  std::string not_measured;  // why `measured` is none; empty when it is measured
};

// The run's first iteration against the median of the later ones.
struct FirstIteration {
  std::int64_t iteration = 0;
  double step_ms = 0, later_median_ms = 0, overhead_ms = 0;
};

struct CheckpointFigures {
  std::int64_t iteration = 0;
  std::size_t ranks = 0;
  double save_ms_max = 0, async_write_ms_max = 0;
};

struct EvaluationFigures {
  std::int64_t after_iteration = 0;
  int ranks = 0;
  double max_ms = 0;
};

struct LossPoint {
  std::int64_t iteration = 0;
  double loss = 0;  // as read: NaN or infinite stays so (null in JSON)
};

// A training metric (megatron.training.*) of the lowest rank that records it, in time order.
struct TrainingSeries {
  int rank = 0;
  std::vector<double> values;
};

// A span-group change (lens ctl) by the iteration it began at.
struct GroupChangeFigures {
  std::int64_t iteration = 0;
  std::string span_groups;
  std::int64_t for_iterations = 0;
  bool restored = false;
  std::size_t ranks = 0;
};

// lens's own counters: the last value of each process's, summed.
struct LostFigures {
  double spans_exported = 0, spans_dropped = 0;
  std::map<std::string, double> dropped_by_reason;
  std::uint64_t spans_truncated = 0;  // ended at shutdown (nemo.span.truncated)
};

struct ReadFigures {
  std::uint64_t files = 0, lines = 0, bytes = 0, spans = 0, spans_of_other_names = 0;
  std::vector<ReadProblem> problems;
};

// A host's clock against the reference host's (the host of the lowest rank), from the run's links (clocks.h).
struct HostClock {
  std::string host;
  Figure offset_ms;                // added to this host's times (none: not estimated, nothing applied)
  Figure at_least_ms, at_most_ms;  // what the links bound the offset to (none: that side is unbounded)
  std::uint64_t links = 0;         // the links between it and the host it was estimated against
};

struct ClockFigures {
  std::string reference;         // empty: one host (or none named), nothing to estimate
  std::vector<HostClock> hosts;  // every other host
  bool corrected = false;        // an offset other than 0 is applied to the bubble and the pictures
  std::string not_bounded;       // the hosts whose offset is not bounded on both sides, and why: figures flagged
  // Nanoseconds to add to `host`'s times (0 for the reference and for a host not estimated).
  std::int64_t offset_ns(const std::string& host) const;
};

struct Figures {
  RunFigures run;
  std::vector<SpanFigures> spans;  // by name
  std::vector<StepFigures> steps;  // by iteration
  // Every rank's compute (forward + backward) by iteration (a step of `steps` each; none where the rank has no step
  // span or no micro-batch span): the HTML page's chart, only when asked for (Report::figures' `series`); never in
  // --json.
  std::map<int, std::vector<Figure>> compute_ms_by_rank;
  PhaseFigures phases;
  StragglerFigures stragglers;
  GoodputFigures goodput;
  ClockFigures clocks;            // each host's offset: what the bubble and the pictures are corrected by
  std::vector<BubbleRow> bubble;  // by stage
  std::optional<FirstIteration> first_iteration;
  std::vector<CheckpointFigures> checkpoints;
  std::vector<EvaluationFigures> evaluations;
  std::vector<LossPoint> loss;
  std::map<std::string, TrainingSeries> training_metrics;
  std::vector<GroupChangeFigures> span_group_changes;
  LostFigures lost;
  ReadFigures read;
};

// The figures as `lens report --json` prints them (a stable format scripts read: CONTRACT §10).
nlohmann::json figures_json(const Figures& figures);

}  // namespace lens_tools
