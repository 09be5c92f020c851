// pretrain_gpt: a Megatron-style GPT pretraining run, data and pipeline parallel (1F1B), on c10d Gloo, traced by
// lens through its public API only: the span tree of SPEC §6, the training metrics of §8, the Megatron resource of
// §5. Launch with torchrun --no_python, mpirun or srun (rank and world size from their variables).
//
//   torchrun --nproc_per_node 4 --no_python --redirects 9:0 --tee 9:0 build/trainer/pretrain_gpt
//     --pipeline-model-parallel-size 2 --num-layers 4 --train-iters 100 --overlap-grad-reduce
//     --otel-enabled --otel-span-groups all                                        (one command line)
#include <sys/resource.h>

#include <csignal>
#include <cstdio>

#include "args.h"
#include "checkpoint_worker.h"
#include "lens/lens.h"
#include "startup_watch.h"
#include "trainer.h"

namespace {

namespace mg = lens::megatron::group;
using trainer::Args;
using trainer::Trainer;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }

// ---- telemetry around the run --------------------------------------------------------------------------------

// What the ranks settle together at the start of each iteration, in one small all-reduce (MAX): whether any was
// asked to stop (SIGTERM; so that none waits in a collective for one that has left) and, when telemetry is
// configured, rank 0's current context in its fixed 26-byte binary form (the others contribute zeros), which the
// pipeline receives link to (SPEC §6: every rank takes part whenever telemetry is configured, exporting or not).
struct Agreement {
  bool stop = false;
  lens::SpanContext rank0_context;
};

Agreement agree(trainer::Parallel& par, bool with_context) {
  lens::BinaryContext bytes{};
  const std::int64_t n = 1 + (with_context ? static_cast<std::int64_t>(bytes.size()) : 0);
  auto values = torch::zeros({n});
  auto* v = values.data_ptr<float>();
  v[0] = g_stop.load() ? 1.0f : 0.0f;
  if (with_context && par.topology().rank == 0) {
    bytes = lens::to_binary(lens::current_context());
    for (std::size_t i = 0; i < bytes.size(); ++i) v[1 + i] = bytes[i];
  }
  std::vector<torch::Tensor> tensors{values};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  par.world().allreduce(tensors, options)->wait();
  v = tensors[0].data_ptr<float>();
  Agreement a;
  a.stop = v[0] > 0;
  if (with_context) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(v[1 + i]);
    a.rank0_context = lens::from_binary(bytes).value_or(lens::SpanContext{});
  }
  return a;
}

// This CPU trainer's stand-in for the GPU's peak allocated memory: the process's peak resident set.
double peak_memory_gb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB
}

void log_line(const Args& a, std::int64_t iteration, const Trainer::StepResult& r, double ms_per_iteration,
              double tokens_per_sec, double tflops) {
  std::printf(" iteration %8lld/%8lld | learning rate: %.3E | lm loss: %.6E | grad norm: %.3f | "
              "elapsed time per iteration (ms): %.1f",
              static_cast<long long>(iteration), static_cast<long long>(a.train_iters), r.learning_rate, r.loss,
              r.grad_norm, ms_per_iteration);
  if (a.log_throughput) std::printf(" | tokens/s: %.0f | TFLOP/s: %.4f", tokens_per_sec, tflops);
  std::printf("\n");
  std::fflush(stdout);
}

int run(const Args& args) {
  lens::RankInfo ranks = lens::detect_rank_info();
  const int dp = trainer::validate(args, ranks.world_size);
  trainer::Topology topology{ranks.rank, ranks.world_size, args.pipeline_model_parallel_size, dp};

  std::signal(SIGTERM, request_stop);  // before lens: its handler flushes telemetry, then calls this one
  lens::Config config = lens::megatron::config_from_env();
  config.apply_cli(args.otel_enabled, args.otel_service_name, args.otel_span_groups);
  // A bad span-group spec fails every rank here, before the rendezvous (where rank 0 leaving early would break
  // the others' connection to its store).
  if (config.enabled) lens::resolve(config.catalogue, config.span_groups, config.span_groups_source);
  // One run id on every rank: rank 0's, through the rendezvous store (the launcher may give none).
  auto store = trainer::make_store(topology);
  trainer::StartupWatch watch(topology, store);  // a rank that dies before training starts is named at once
  if (ranks.rank == 0) {
    const std::string id = lens::resolve_run_id(config);
    store->set("lens/run_id", std::vector<std::uint8_t>(id.begin(), id.end()));
  }
  const std::vector<std::uint8_t> shared_id = store->get("lens/run_id");
  config.run_id.assign(shared_id.begin(), shared_id.end());
  const lens::megatron::TrainingArgs training{.local_rank = ranks.local_rank,
                                              .tensor_model_parallel_size = args.tensor_model_parallel_size,
                                              .pipeline_model_parallel_size = args.pipeline_model_parallel_size,
                                              .data_parallel_size = dp,
                                              .global_batch_size = args.global_batch_size,
                                              .seq_length = args.seq_length,
                                              .num_layers = args.num_layers,
                                              .hidden_size = args.hidden_size,
                                              .num_attention_heads = args.num_attention_heads,
                                              .train_iters = args.train_iters,
                                              .micro_batch_size = args.micro_batch_size,
                                              .ckpt_format = args.ckpt_format,
                                              .fp16 = args.fp16,
                                              .bf16 = args.bf16};
  // Setup that can fail on one rank only (an exporting rank's exporter) ends every rank at once.
  lens::Telemetry telemetry;
  watch.enter("telemetry setup");
  trainer::all_or_none(*store, topology, "telemetry setup", [&] {
    telemetry = lens::setup_telemetry(config, {.rank = ranks.rank,
                                               .world_size = ranks.world_size,
                                               .local_rank = ranks.local_rank,
                                               .resource_provider = lens::megatron::resource_provider(training)});
  });
  watch.before_ending([&telemetry] { telemetry.force_flush(); });
  const bool telemetry_on = config.enabled;
  torch::set_num_threads(1);  // ranks share the machine's cores

  double final_train_loss = 0, last_eval = -1;
  {
    LENS_SPAN_NAMED(pretrain, mg::job, "megatron.pretrain", {"megatron.model_type", "gpt"},
                    {"megatron.train_iters", args.train_iters}, {"megatron.global_batch_size", args.global_batch_size});
    std::unique_ptr<trainer::Parallel> parallel;
    std::unique_ptr<Trainer> trainer;
    trainer::Corpus corpus;
    {
      watch.enter("data loading");
      LENS_SPAN(mg::data_loading, "megatron.data_loading");
      LENS_TRACE_REGION("dataset.read_text");
      corpus = trainer::load_corpus(args.data_path);
    }
    {
      LENS_SPAN(mg::model_init, "megatron.model_init");
      watch.enter("process group setup");
      parallel = watch.naming_the_dead([&] { return std::make_unique<trainer::Parallel>(topology, store); });
      watch.enter("model setup");
      // The worker's resource comes from the same function as this rank's (built only where it is exported).
      lens::ResourceAttributes resource =
          telemetry.is_exporting() ? lens::megatron::resource_attributes(training) : lens::ResourceAttributes{};
      trainer::all_or_none(*store, topology, "model setup", [&] {
        trainer = watch.naming_the_dead(
            [&] { return std::make_unique<Trainer>(args, *parallel, corpus, telemetry, std::move(resource)); });
      });
    }
    bool loaded = false;
    if (!args.load.empty()) {  // one stage's file missing or truncated ends every rank, not only its own
      watch.enter("checkpoint load");
      trainer::all_or_none(*store, topology, "checkpoint load", [&] { loaded = trainer->load_checkpoint(args.load); });
    }
    watch.finished();
    if (loaded && ranks.rank == 0)
      std::printf(" loaded checkpoint from %s at iteration %lld\n", args.load.c_str(),
                  static_cast<long long>(trainer->iteration()));

    const lens::SpanContext pretrain_context = pretrain.context();
    const trainer::GptConfig& model = trainer->config();
    const bool prints = ranks.rank == ranks.world_size - 1;  // Megatron logs on the last rank
    bool first = true;
    auto interval_start = Clock::now();
    std::int64_t interval_iterations = 0;
    lens::SpanContext previous_segment;
    bool stopping = false;
    while (trainer->iteration() < args.train_iters && !stopping) {
      // One trace segment per save interval (the whole run without one): the first is pretrain's child, each
      // later one a new trace linked to pretrain and to the segment before.
      const bool later_segment = previous_segment.is_valid();
      lens::ScopedSpan segment;
      if (LENS_GROUP_ENABLED(mg::job))
        segment.start(mg::job, "megatron.train", {{"megatron.train_iters", args.train_iters}},
                      {.root = later_segment});
      if (later_segment) {
        segment.add_link(pretrain_context);
        segment.add_link(previous_segment);
      }
      const std::int64_t segment_end =
          args.save_interval > 0 ? std::min(args.train_iters, (trainer->iteration() / args.save_interval + 1) * args.save_interval)
                                 : args.train_iters;
      while (trainer->iteration() < segment_end) {
        const Agreement agreement = agree(*parallel, telemetry_on);
        if ((stopping = agreement.stop)) break;
        const lens::SpanContext& iteration_context = agreement.rank0_context;
        lens::Span first_iteration;
        if (first && LENS_GROUP_ENABLED(mg::first_iteration))
          first_iteration.start(mg::first_iteration, "megatron.train.first_iteration",
                                {{"megatron.iteration", trainer->iteration() + 1}});
        const Trainer::StepResult r = trainer->train_step(iteration_context);
        first_iteration.end();
        first = false;
        final_train_loss = r.loss;
        ++interval_iterations;
        const std::int64_t it = trainer->iteration();
        if (it % args.log_interval == 0 || it == args.train_iters) {
          const double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
          const double per_iteration = seconds / static_cast<double>(interval_iterations);
          const double tokens_per_sec = static_cast<double>(args.global_batch_size * args.seq_length) / per_iteration;
          const double tflops = trainer::flops_per_iteration(model, args.global_batch_size) / per_iteration /
                                1e12 / ranks.world_size;
          lens::megatron::record_training_metrics({.step_duration_ms = 1000.0 * per_iteration,
                                                   .loss = r.loss,
                                                   .throughput_tflops = tflops,
                                                   .grad_norm = r.grad_norm,
                                                   .skipped_iters = std::int64_t{0},
                                                   .learning_rate = r.learning_rate,
                                                   .tokens_per_sec = tokens_per_sec,
                                                   .memory_allocated_gb = peak_memory_gb()});
          if (lens::should_log(lens::Severity::kInfo))
            lens::log(lens::Severity::kInfo, "training progress", {{"megatron.iteration", it}, {"megatron.loss", r.loss}});
          if (prints) log_line(args, it, r, 1000.0 * per_iteration, tokens_per_sec, tflops);
          interval_start = Clock::now();
          interval_iterations = 0;
        }
        if (args.eval_interval > 0 && it % args.eval_interval == 0) {
          last_eval = trainer->evaluate();
          if (prints) std::printf(" validation loss at iteration %lld: %.6E\n", static_cast<long long>(it), last_eval);
        }
        if (args.save_interval > 0 && it % args.save_interval == 0) trainer->save_checkpoint(args.save);
      }
      previous_segment = segment.context();
    }
    if (stopping && !args.save.empty()) trainer->save_checkpoint(args.save);
    trainer->finish_pending_save();
    if (!stopping && last_eval < 0) last_eval = trainer->evaluate();
    if (prints)
      std::printf(" done: %lld iterations, last training loss %.4f, validation loss %.4f%s\n",
                  static_cast<long long>(trainer->iteration()), final_train_loss, last_eval,
                  stopping ? " (stopped by SIGTERM)" : "");
    parallel->barrier();
  }
  telemetry.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--checkpoint-worker") return trainer::run_checkpoint_worker();
  // A checkpoint worker that dies must be an error with a message on its rank (and telemetry flushed at exit), not
  // a silent SIGPIPE at the next write to its pipe. Python, which launches Megatron, ignores SIGPIPE the same way.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run(trainer::parse_args(argc, argv));
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
