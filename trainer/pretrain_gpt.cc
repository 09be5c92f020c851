// pretrain_gpt: a Megatron-style GPT pretraining run, tensor, data and pipeline parallel (1F1B), on c10d Gloo,
// traced by lens through its public API only: the span tree of CONTRACT §6, the training metrics of §8, the Megatron
// resource of §5. Launch with torchrun --no_python, mpirun or srun (rank and world size from their variables).
//
//   torchrun --nproc_per_node 4 --no_python --redirects 9:0 --tee 9:0 build/trainer/pretrain_gpt
//     --pipeline-model-parallel-size 2 --num-layers 4 --train-iters 100 --overlap-grad-reduce
//     --otel-enabled --otel-span-groups all                                        (one command line)
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "args.h"
#include "checkpoint_worker.h"
#include "lens/lens.h"
#include "logger.h"
#include "simulated_gpu.h"
#include "startup_watch.h"
#include "trainer.h"
#include "whereabouts.h"

namespace {

namespace mg = lens::megatron::group;
using trainer::Args;
using trainer::Trainer;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }

Clock::time_point g_main_started;  // for --testing-startup-times
double ms_since_main() { return std::chrono::duration<double, std::milli>(Clock::now() - g_main_started).count(); }

// Wall-clock times of startup, for Megatron's back-dated megatron.startup.* spans (SPAN_NAMES=megatron).
std::uint64_t unix_nanos_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}
std::uint64_t g_main_unix_nanos = 0, g_args_parsed_unix_nanos = 0;

// ---- telemetry around the run --------------------------------------------------------------------------------

// What every rank must agree on before an iteration, settled in one small all-reduce (MAX): whether any rank was
// asked to stop (SIGTERM), so that no rank waits in a collective for one that has left; and the span-group change
// rank 0's control endpoint took (`lens ctl`, lens/control.h), so that every rank switches at the same iteration.
struct IterationAgreement {
  bool stop = false;
  lens::SpanGroupRequest span_groups;
};

IterationAgreement agree_before_iteration(trainer::Parallel& parallel) {
  const auto request = lens::take_span_group_request().encode();
  std::vector<std::int64_t> words{g_stop.load() ? 1 : 0};
  words.insert(words.end(), request.begin(), request.end());
  std::vector<torch::Tensor> tensors{torch::tensor(words, torch::kLong)};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  parallel.world().allreduce(tensors, options)->wait();
  const auto agreed = tensors[0].accessor<std::int64_t, 1>();
  std::array<std::int64_t, lens::SpanGroupRequest::kWords> change{};
  for (int i = 0; i < lens::SpanGroupRequest::kWords; ++i) change[i] = agreed[i + 1];
  return {agreed[0] > 0, lens::SpanGroupRequest::decode(change)};
}

// Every STRAGGLER_INTERVAL iterations, every rank: each puts its window's summary in its own slot and one SUM
// all-reduce gathers them all (lens/straggler.h); the exporting rank hands them to lens's scoring thread.
void gather_stragglers(trainer::Parallel& parallel, const trainer::Topology& topology, std::int64_t iteration) {
  constexpr int kWords = lens::StragglerSummary::kWords;
  const auto mine = lens::take_straggler_summary(iteration, topology.stage(), topology.tensor_rank()).encode();
  torch::Tensor slots = torch::zeros({std::int64_t{topology.world_size} * kWords}, torch::kLong);
  auto words = slots.accessor<std::int64_t, 1>();
  for (int i = 0; i < kWords; ++i) words[std::int64_t{topology.rank} * kWords + i] = mine[static_cast<std::size_t>(i)];
  std::vector<torch::Tensor> tensors{slots};
  parallel.world().allreduce(tensors)->wait();
  std::vector<lens::StragglerSummary> by_rank(static_cast<std::size_t>(topology.world_size));
  for (int rank = 0; rank < topology.world_size; ++rank) {
    std::array<std::int64_t, kWords> w{};
    for (int i = 0; i < kWords; ++i) w[static_cast<std::size_t>(i)] = words[std::int64_t{rank} * kWords + i];
    by_rank[static_cast<std::size_t>(rank)] = lens::StragglerSummary::decode(w);
  }
  lens::score_stragglers(iteration, by_rank);
}

// This CPU trainer's stand-in for the GPU's peak allocated memory: the process's peak resident set.
double peak_memory_gb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB
}

// Megatron's iteration line.
void log_line(const Args& a, std::int64_t iteration, const Trainer::StepResult& r, double ms_per_iteration,
              double tokens_per_sec, double tflops) {
  std::string line = fmt::format(
      " iteration {:8d}/{:8d} | learning rate: {:.3E} | lm loss: {:.6E} | grad norm: {:.3f} | "
      "elapsed time per iteration (ms): {:.1f}",
      iteration, a.train_iters, r.learning_rate, r.loss, r.grad_norm, ms_per_iteration);
  if (a.log_throughput) line += fmt::format(" | tokens/s: {:.0f} | TFLOP/s: {:.4f}", tokens_per_sec, tflops);
  spdlog::info(line);
}

// One rank's run: rendezvous and telemetry setup (the constructor), then the pretrain span around data loading,
// model setup, the training segments and the end of training.
class PretrainRun {
 public:
  explicit PretrainRun(const Args& args);
  int run();

 private:
  lens::megatron::TrainingArgs training_args() const;
  void set_up_telemetry();
  void build_trainer();
  // One trace segment: the iterations up to the next save (all of them without --save-interval). False when a
  // rank was asked to stop.
  bool train_segment(const lens::SpanContext& pretrain_context);
  void train_iteration(const lens::SpanContext& segment, const std::optional<lens::SpanGroupChange>& change);
  void log_interval(std::int64_t iteration, const Trainer::StepResult& step);
  void watch_stragglers(lens::ScopedSpan& segment);
  void finish_training(bool stopped);
  const lens::megatron::SpanNames& names() const { return lens::megatron::span_names(config_.span_names); }
  // SPAN_NAMES=megatron: today's Megatron-LM's span tree (no run-long span: startup and each segment are traces of
  // their own), with its names.
  bool megatron_tree() const { return config_.span_names == lens::SpanNaming::kMegatron; }
  void record_startup_phases();
  void log_iteration(std::int64_t iteration, const Trainer::StepResult& step);
  void save_checkpoint();

  const Args& args_;
  const lens::RankInfo ranks_ = lens::detect_rank_info();
  const trainer::Topology topology_;
  const bool prints_;  // Megatron logs on the last rank
  lens::Config config_;
  c10::intrusive_ptr<c10d::Store> store_;
  trainer::StartupWatch watch_;  // a rank that dies before training starts is named at once
  lens::Telemetry telemetry_;
  // megatron.training.mfu's denominator: --peak-tflops, else the rank's GPU by NVML (an exporting rank's), else none.
  std::optional<double> peak_tflops_;

  trainer::Corpus corpus_;
  std::unique_ptr<trainer::Parallel> parallel_;
  std::unique_ptr<Trainer> trainer_;

  bool first_iteration_ = true;
  std::uint64_t initialized_unix_nanos_ = 0;  // rendezvous and telemetry set up
  lens::SpanContext startup_;                 // megatron.startup (SPAN_NAMES=megatron)
  lens::SpanContext previous_segment_;
  Clock::time_point interval_start_;
  std::int64_t interval_iterations_ = 0;
  double final_train_loss_ = 0;
  double last_validation_loss_ = -1;  // none yet
};

trainer::Topology topology_of(const Args& args, const lens::RankInfo& ranks) {
  const int dp = trainer::validate(args, ranks.world_size);
  return {.rank = ranks.rank,
          .world_size = ranks.world_size,
          .pipeline_size = args.pipeline_model_parallel_size,
          .data_parallel_size = dp,
          .tensor_parallel_size = args.tensor_model_parallel_size,
          .rendezvous_timeout = std::chrono::seconds(args.testing_rendezvous_timeout_s)};
}

lens::Config config_of(const Args& args) {
  std::signal(SIGTERM, request_stop);  // before lens: its handler flushes telemetry, then calls this one
  lens::Config config = lens::megatron::config_from_env();
  config.apply_cli(args.otel_enabled, args.otel_service_name, args.otel_span_groups);
  // A bad span-group spec fails every rank here, before the rendezvous (where rank 0 leaving early would break
  // the others' connection to its store).
  if (config.enabled) lens::resolve(config.catalogue, config.span_groups, config.span_groups_source);
  return config;
}

PretrainRun::PretrainRun(const Args& args)
    : args_(args),
      topology_(topology_of(args, ranks_)),
      prints_(ranks_.rank == ranks_.world_size - 1),
      config_(config_of(args)),
      store_(trainer::make_store(topology_)),
      watch_(topology_, store_) {
  set_up_telemetry();
  initialized_unix_nanos_ = unix_nanos_now();
  torch::set_num_threads(1);  // ranks share the machine's cores
}

lens::megatron::TrainingArgs PretrainRun::training_args() const {
  return {.local_rank = ranks_.local_rank,
          .tensor_model_parallel_size = args_.tensor_model_parallel_size,
          .pipeline_model_parallel_size = args_.pipeline_model_parallel_size,
          .data_parallel_size = topology_.data_parallel_size,
          .global_batch_size = args_.global_batch_size,
          .seq_length = args_.seq_length,
          .num_layers = args_.num_layers,
          .hidden_size = args_.hidden_size,
          .num_attention_heads = args_.num_attention_heads,
          .train_iters = args_.train_iters,
          .micro_batch_size = args_.micro_batch_size,
          .ckpt_format = args_.ckpt_format,
          .fp16 = args_.fp16,
          .bf16 = args_.bf16,
          .ranks = lens::megatron::ParallelRanks{
              .tensor = topology_.tensor_rank(), .pipeline = topology_.stage(), .data = topology_.data_rank()}};
}

void PretrainRun::set_up_telemetry() {
  // One run id on every rank: rank 0's, through the rendezvous store (the launcher may give none).
  if (ranks_.rank == 0) {
    const std::string id = lens::resolve_run_id(config_);
    store_->set("lens/run_id", std::vector<std::uint8_t>(id.begin(), id.end()));
  }
  const std::vector<std::uint8_t> shared_id = store_->get("lens/run_id");
  config_.run_id.assign(shared_id.begin(), shared_id.end());
  const double agreed_ms = ms_since_main();
  // Setup that can fail on one rank only (an exporting rank's exporter) ends every rank at once.
  watch_.enter("telemetry setup");
  trainer::all_or_none(*store_, topology_, "telemetry setup", [&] {
    telemetry_ =
        lens::setup_telemetry(config_, {.rank = ranks_.rank,
                                        .world_size = ranks_.world_size,
                                        .local_rank = ranks_.local_rank,
                                        .resource_provider = lens::megatron::resource_provider(training_args())});
  });
  watch_.before_ending([this] { telemetry_.force_flush(); });
  trainer::SimulatedGpu::open(args_.testing_fake_cuda, args_.testing_kernel_us);
  if (args_.peak_tflops > 0) {
    peak_tflops_ = args_.peak_tflops;
  } else if (telemetry_.is_exporting()) {
    if (const auto gpu = lens::detect_gpu_identity(ranks_.local_rank))
      peak_tflops_ = lens::megatron::peak_tflops(gpu->name, args_.bf16 || args_.fp16);
  }
  if (args_.testing_startup_times)
    std::fprintf(stderr, "pretrain_gpt: startup of rank %d: run id agreed at %.1f ms, telemetry set up at %.1f ms\n",
                 ranks_.rank, agreed_ms, ms_since_main());
}

void PretrainRun::build_trainer() {
  {
    watch_.enter("data loading");
    LENS_SPAN(mg::data_loading, names().data_loading, lens::megatron::kGoodput);
    LENS_TRACE_REGION("dataset.read_text");
    corpus_ = trainer::load_corpus(args_.data_path);
  }
  {
    LENS_SPAN(mg::model_init, names().model_init, lens::megatron::kGoodput);
    watch_.enter("process group setup");
    if (args_.testing_stall_startup && topology_.rank == args_.testing_slow_rank) {
      std::fprintf(stderr, "pretrain_gpt: rank %d stalls in startup until killed (--testing-stall-startup)\n",
                   topology_.rank);
      std::fflush(stderr);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    parallel_ = watch_.naming_the_dead([&] { return std::make_unique<trainer::Parallel>(topology_, store_); });
    watch_.enter("model setup");
    // The worker's resource comes from the same function as this rank's (built only where it is exported).
    lens::ResourceAttributes resource =
        telemetry_.is_exporting() ? lens::megatron::resource_attributes(training_args()) : lens::ResourceAttributes{};
    trainer::all_or_none(*store_, topology_, "model setup", [&] {
      trainer_ = watch_.naming_the_dead(
          [&] { return std::make_unique<Trainer>(args_, *parallel_, corpus_, telemetry_, std::move(resource)); });
    });
  }
  bool loaded = false;
  if (!args_.load.empty()) {  // one stage's file missing or truncated ends every rank, not only its own
    watch_.enter("checkpoint load");
    trainer::all_or_none(*store_, topology_, "checkpoint load",
                         [&] { loaded = trainer_->load_checkpoint(args_.load); });
  }
  watch_.finished();
  if (loaded && ranks_.rank == 0)
    spdlog::info(" loaded checkpoint from {} at iteration {}", args_.load, trainer_->iteration());
}

int PretrainRun::run() {
  bool stopped = false;
  {
    // Documented names: megatron.pretrain spans the run. SPAN_NAMES=megatron, as today's Megatron-LM: no run-long
    // span; megatron.startup, the root of a trace of its own, spans startup, from main.
    lens::ScopedSpan pretrain;
    if (!megatron_tree() && LENS_GROUP_ENABLED(mg::job))
      pretrain.start(mg::job, "megatron.pretrain",
                     {{"megatron.model_type", "gpt"},
                      {"megatron.train_iters", args_.train_iters},
                      {"megatron.global_batch_size", args_.global_batch_size},
                      lens::megatron::kGoodput});
    {
      lens::ScopedSpan startup;
      if (megatron_tree() && LENS_GROUP_ENABLED(mg::job)) {
        startup.start(mg::job, "megatron.startup", {{"megatron.model_type", "gpt"}, lens::megatron::kGoodput},
                      {.root = true, .start_unix_nanos = g_main_unix_nanos});
        record_startup_phases();
      }
      build_trainer();
      startup_ = startup.context();
    }
    interval_start_ = Clock::now();
    try {
      while (trainer_->iteration() < args_.train_iters && !stopped) stopped = !train_segment(pretrain.context());
      finish_training(stopped);
    } catch (const std::exception& e) {  // a peer lost mid-run: Gloo names its address, the store its ranks
      throw std::runtime_error(trainer::name_lost_peers(*store_, topology_, trainer::error_message(e)));
    }
  }
  telemetry_.shutdown();
  return 0;
}

// Megatron's back-dated children of megatron.startup, for the phases this trainer has: parsing the arguments, and
// initialisation (the rendezvous and telemetry setup).
void PretrainRun::record_startup_phases() {
  lens::Span phase;
  phase.start(mg::job, "megatron.startup.arg_parse", {lens::megatron::kGoodput},
              {.start_unix_nanos = g_main_unix_nanos});
  phase.end_at(g_args_parsed_unix_nanos);
  phase.start(mg::job, "megatron.startup.initialize_megatron", {lens::megatron::kGoodput},
              {.start_unix_nanos = g_args_parsed_unix_nanos});
  phase.end_at(initialized_unix_nanos_);
}

bool PretrainRun::train_segment(const lens::SpanContext& pretrain_context) {
  // Documented names: the first segment is pretrain's child, each later one a new trace linked to pretrain and to
  // the one before. SPAN_NAMES=megatron: each is a new trace linked to the one before (the first to startup).
  const bool later_segment = previous_segment_.is_valid();
  lens::ScopedSpan segment;
  if (LENS_GROUP_ENABLED(mg::job))
    segment.start(mg::job, "megatron.train", {{"megatron.train_iters", args_.train_iters}, lens::megatron::kGoodput},
                  {.root = later_segment || megatron_tree()});
  if (megatron_tree()) {
    segment.add_link(later_segment ? previous_segment_ : startup_);
  } else if (later_segment) {
    segment.add_link(pretrain_context);
    segment.add_link(previous_segment_);
  }
  const std::int64_t save_interval = args_.save_interval;
  const std::int64_t segment_end =
      save_interval > 0 ? std::min(args_.train_iters, (trainer_->iteration() / save_interval + 1) * save_interval)
                        : args_.train_iters;
  bool go_on = true;
  while (go_on && trainer_->iteration() < segment_end) {
    const IterationAgreement agreed = agree_before_iteration(*parallel_);
    go_on = !agreed.stop;
    if (!go_on) break;
    train_iteration(segment.context(), lens::at_iteration_boundary(trainer_->iteration() + 1, agreed.span_groups));
    if (lens::straggler_summary_due(trainer_->iteration())) watch_stragglers(segment);
  }
  previous_segment_ = segment.context();
  return go_on;
}

void PretrainRun::train_iteration(const lens::SpanContext& segment,
                                  const std::optional<lens::SpanGroupChange>& change) {
  // A sibling of the step span, not its parent (CONTRACT §6): started, not made current.
  lens::Span first_iteration;
  if (first_iteration_ && LENS_GROUP_ENABLED(mg::first_iteration))
    first_iteration.start(mg::first_iteration, "megatron.train.first_iteration",
                          {{"megatron.iteration", trainer_->iteration() + 1}, lens::megatron::kGoodput});
  const Trainer::StepResult step = trainer_->train_step(segment, change);
  first_iteration.end();
  first_iteration_ = false;
  final_train_loss_ = step.loss;
  ++interval_iterations_;
  const std::int64_t iteration = trainer_->iteration();
  log_iteration(iteration, step);
  if (args_.eval_interval > 0 && iteration % args_.eval_interval == 0) {
    last_validation_loss_ = trainer_->evaluate();
    if (prints_) spdlog::info(" validation loss at iteration {}: {:.6E}", iteration, last_validation_loss_);
  }
  if (args_.save_interval > 0 && iteration % args_.save_interval == 0) save_checkpoint();
}

// After each iteration, the log line and metrics when due; SPAN_NAMES=megatron, in Megatron's report spans (every
// iteration, as Megatron's training_log runs every iteration).
void PretrainRun::log_iteration(std::int64_t iteration, const Trainer::StepResult& step) {
  const bool due = iteration % args_.log_interval == 0 || iteration == args_.train_iters;
  const bool megatron = megatron_tree();
  LENS_SPAN_IF(megatron, mg::step, "megatron.train.iteration_report", lens::megatron::kGoodput);
  LENS_SPAN_IF(megatron, mg::step, "megatron.train.log", lens::megatron::kGoodput);
  if (due) log_interval(iteration, step);
}

// SPAN_NAMES=megatron: inside Megatron's megatron.checkpoint.exposed_save, the save's cost to the training loop.
void PretrainRun::save_checkpoint() {
  const bool megatron = megatron_tree();
  LENS_SPAN_IF(megatron, mg::checkpoint, "megatron.checkpoint.exposed_save",
               {"megatron.iteration", trainer_->iteration()}, lens::megatron::kGoodput);
  trainer_->save_checkpoint(args_.save);
}

// The findings scored since the last window (usually the last window's) as an event of the segment span, on the
// exporting rank.
void PretrainRun::watch_stragglers(lens::ScopedSpan& segment) {
  gather_stragglers(*parallel_, topology_, trainer_->iteration());
  const auto found = lens::take_straggler_findings();
  if (!found) return;
  for (int rank : found->flagged) {
    const auto& v =
        *std::find_if(found->ranks.begin(), found->ranks.end(), [&](const auto& r) { return r.rank == rank; });
    segment.add_event("lens.straggler", {{"dl.rank", rank},
                                         {"dl.pipeline_parallel.rank", v.stage},
                                         {"dl.tensor_parallel.rank", v.tensor_rank},
                                         {"lens.straggler.score", v.score},
                                         {"megatron.iteration", found->iteration}});
  }
}

// The metrics and the logged line of one --log-interval.
void PretrainRun::log_interval(std::int64_t iteration, const Trainer::StepResult& step) {
  const double seconds = std::chrono::duration<double>(Clock::now() - interval_start_).count();
  const double per_iteration = seconds / static_cast<double>(interval_iterations_);
  const double tokens_per_sec = static_cast<double>(args_.global_batch_size * args_.seq_length) / per_iteration;
  const double tflops = trainer::flops_per_iteration(trainer_->config(), args_.global_batch_size) / per_iteration /
                        1e12 / ranks_.world_size;
  lens::megatron::record_training_metrics({.step_duration_ms = 1000.0 * per_iteration,
                                           .loss = step.loss,
                                           .throughput_tflops = tflops,
                                           .grad_norm = step.grad_norm,
                                           .skipped_iters = std::int64_t{0},
                                           .learning_rate = step.learning_rate,
                                           .tokens_per_sec = tokens_per_sec,
                                           .memory_allocated_gb = peak_memory_gb(),
                                           .mfu = peak_tflops_ ? std::optional(tflops / *peak_tflops_) : std::nullopt});
  if (prints_) log_line(args_, iteration, step, 1000.0 * per_iteration, tokens_per_sec, tflops);
  interval_start_ = Clock::now();
  interval_iterations_ = 0;
}

void PretrainRun::finish_training(bool stopped) {
  if (stopped && !args_.save.empty()) save_checkpoint();
  {
    // The last asynchronous save, waited for before the job ends: Megatron's exit_finalize.
    const bool megatron = megatron_tree() && args_.async_save;
    LENS_SPAN_IF(megatron, mg::checkpoint, "megatron.checkpoint.exit_finalize", lens::megatron::kGoodput);
    trainer_->finish_pending_save();
  }
  if (!stopped && last_validation_loss_ < 0) last_validation_loss_ = trainer_->evaluate();
  if (prints_)
    spdlog::info(" done: {} iterations, last training loss {:.4f}, validation loss {:.4f}{}", trainer_->iteration(),
                 final_train_loss_, last_validation_loss_, stopped ? " (stopped by SIGTERM)" : "");
  parallel_->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  g_main_started = Clock::now();
  g_main_unix_nanos = unix_nanos_now();
  if (argc == 2 && std::string_view(argv[1]) == "--checkpoint-worker") return trainer::run_checkpoint_worker();
  // A checkpoint worker that dies must be an error with a message on its rank (and telemetry flushed at exit), not
  // a silent SIGPIPE at the next write to its pipe. Python, which launches Megatron, ignores SIGPIPE the same way.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    const Args args = trainer::parse_args(argc, argv);
    g_args_parsed_unix_nanos = unix_nanos_now();
    trainer::install_logger();
    return PretrainRun(args).run();
  } catch (const trainer::ArgsError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pretrain_gpt: %s\n", trainer::error_message(e).c_str());
    return 1;
  }
}
