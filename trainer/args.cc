#include "args.h"

#include <CLI/CLI.hpp>
#include <filesystem>

namespace trainer {

Args parse_args(int argc, char** argv) {
  Args a;
  CLI::App app{
      "pretrain_gpt: a Megatron-style GPT pretraining run (tensor, data and pipeline parallel), traced by lens"};
  app.add_option("--num-layers", a.num_layers, "Transformer layers")->check(CLI::PositiveNumber);
  app.add_option("--hidden-size", a.hidden_size, "Hidden size")->check(CLI::PositiveNumber);
  app.add_option("--num-attention-heads", a.num_attention_heads, "Attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq-length", a.seq_length, "Tokens (bytes) per sample")->check(CLI::PositiveNumber);
  app.add_option("--micro-batch-size", a.micro_batch_size, "Samples per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--global-batch-size", a.global_batch_size, "Samples per iteration")->check(CLI::PositiveNumber);
  app.add_option("--train-iters", a.train_iters, "Iterations to train to")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", a.lr, "Peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--min-lr", a.min_lr, "Learning rate at the end of the decay")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-warmup-iters", a.lr_warmup_iters, "Linear warm-up iterations")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay-style", a.lr_decay_style, "constant, linear or cosine")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}));
  app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--clip-grad", a.clip_grad, "Gradient norm clip (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--pipeline-model-parallel-size", a.pipeline_model_parallel_size, "Pipeline stages")
      ->check(CLI::PositiveNumber);
  app.add_option("--tensor-model-parallel-size", a.tensor_model_parallel_size,
                 "Ranks that split each layer (attention heads, MLP columns); must divide --num-attention-heads")
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute-granularity", a.recompute_granularity,
                 "full: keep only each recomputed layer's input in forward, run its forward again in backward")
      ->check(CLI::IsMember({"full"}));
  app.add_option("--recompute-method", a.recompute_method,
                 "uniform: recompute every layer, in chunks of --recompute-num-layers; block: only the first "
                 "--recompute-num-layers layers of each stage")
      ->check(CLI::IsMember({"uniform", "block"}));
  app.add_option("--recompute-num-layers", a.recompute_num_layers,
                 "Layers per recomputed chunk (uniform) or recomputed layers per stage (block); default 1")
      ->check(CLI::PositiveNumber);
  app.add_flag("--overlap-grad-reduce", a.overlap_grad_reduce,
               "Start each gradient bucket's all-reduce during backward, as soon as its gradients are ready");
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "Elements per gradient bucket with --overlap-grad-reduce (default max(40M, 1M x DP))")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", a.seed, "Random seed");
  app.add_option("--data-path", a.data_path,
                 "Text file to train on (default: README.md and docs/*.md as they were when the build was configured)");
  app.add_option("--save", a.save, "Checkpoint directory to save to");
  app.add_option("--load", a.load, "Checkpoint directory to resume from");
  app.add_option("--save-interval", a.save_interval, "Iterations between checkpoints")->check(CLI::NonNegativeNumber);
  app.add_flag("--async-save", a.async_save, "Write checkpoints from a worker process");
  app.add_option("--eval-interval", a.eval_interval, "Iterations between evaluations (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-iters", a.eval_iters, "Batches per evaluation")->check(CLI::PositiveNumber);
  app.add_option("--log-interval", a.log_interval, "Iterations between log lines")->check(CLI::PositiveNumber);
  app.add_flag("--log-throughput", a.log_throughput, "Log tokens/s and TFLOP/s");
  app.add_option("--peak-tflops", a.peak_tflops,
                 "The GPU's peak TFLOP/s for megatron.training.mfu (default: from NVML's device name with "
                 "--bf16/--fp16, docs/GPU.md)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--bf16", a.bf16, "Accepted for Megatron compatibility; this CPU trainer computes in fp32");
  app.add_flag("--fp16", a.fp16, "Accepted for Megatron compatibility; this CPU trainer computes in fp32");
  app.add_option("--ckpt-format", a.ckpt_format, "Checkpoint format")->check(CLI::IsMember({"torch"}));
  // Megatron's `opentelemetry` argument group: the flags that override the MEGATRON_OTEL_* environment.
  const std::string otel = "opentelemetry";
  app.add_flag("--otel-enabled", a.otel_enabled, "Turn telemetry on (else MEGATRON_OTEL_ENABLED decides)")->group(otel);
  app.add_option("--otel-service-name", a.otel_service_name, "Telemetry service name")->group(otel);
  app.add_option("--otel-span-groups", a.otel_span_groups, "Span-group spec, e.g. per_step or all,-layer")->group(otel);
  app.add_option("--testing-slow-rank", a.testing_slow_rank,
                 "Testing aid: this rank sleeps --testing-slow-ms in every micro-batch forward (a known straggler)");
  app.add_option("--testing-slow-ms", a.testing_slow_ms, "Testing aid: see --testing-slow-rank")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--testing-slow-from", a.testing_slow_from,
                 "Testing aid: the first iteration --testing-slow-rank is slowed in (default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--testing-stall-iteration", a.testing_stall_iteration,
                 "Testing aid: at this iteration --testing-slow-rank stops until killed (a hang), where "
                 "--testing-stall-in says");
  app.add_option("--testing-stall-in", a.testing_stall_in,
                 "Testing aid: forward (micro-batch 1's, the default), backward (micro-batch 1's), optimizer, or "
                 "evaluate (micro-batch 1's forward in the evaluation after that iteration)")
      ->check(CLI::IsMember({"forward", "backward", "optimizer", "evaluate"}));
  app.add_flag("--testing-startup-times", a.testing_startup_times,
               "Testing aid: print on stderr when this rank agreed on the run id and finished telemetry setup, in ms "
               "from the start of main (bench/scale.sh reads it)");
  app.add_option(
      "--testing-fake-cuda", a.testing_fake_cuda,
      "Testing aid: the CUDA runtime's simulator (libcudart.so.12 of the tests); each layer's attention and "
      "MLP also queue a simulated kernel of --testing-kernel-us on a stream of it, set as lens's device stream");
  app.add_option("--testing-kernel-us", a.testing_kernel_us, "Testing aid: see --testing-fake-cuda (default 500)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--testing-stall-startup", a.testing_stall_startup,
               "Testing aid: --testing-slow-rank stops in startup (process group setup) until killed (a rank that "
               "dies during startup, at a known place)");
  app.add_option("--testing-rendezvous-timeout-s", a.testing_rendezvous_timeout_s,
                 "Testing aid: the rendezvous store's timeout (default 120); a rank that never joins is named 20 s "
                 "before it")
      ->check(CLI::Range(30, 3600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    throw ArgsError(std::string("pretrain_gpt: ") + e.what() + " (--help lists the flags)");
  }
  return a;
}

int validate(const Args& a, int world_size) {
  auto fail = [](const std::string& what) { throw ArgsError("pretrain_gpt: " + what); };
  const int pp = a.pipeline_model_parallel_size, tp = a.tensor_model_parallel_size;
  if (world_size % (tp * pp) != 0)
    fail("the world size " + std::to_string(world_size) + " is not divisible by --tensor-model-parallel-size " +
         std::to_string(tp) + " x --pipeline-model-parallel-size " + std::to_string(pp));
  const int dp = world_size / (tp * pp);
  if (a.num_layers % pp != 0)
    fail("--num-layers " + std::to_string(a.num_layers) + " is not divisible by --pipeline-model-parallel-size " +
         std::to_string(pp));
  if (a.hidden_size % a.num_attention_heads != 0)
    fail("--hidden-size " + std::to_string(a.hidden_size) + " is not divisible by --num-attention-heads " +
         std::to_string(a.num_attention_heads));
  if (a.global_batch_size % (static_cast<std::int64_t>(a.micro_batch_size) * dp) != 0)
    fail("--global-batch-size " + std::to_string(a.global_batch_size) + " is not divisible by --micro-batch-size " +
         std::to_string(a.micro_batch_size) + " x data-parallel size " + std::to_string(dp));
  if (a.num_attention_heads % tp != 0)
    fail("--num-attention-heads " + std::to_string(a.num_attention_heads) +
         " is not divisible by --tensor-model-parallel-size " + std::to_string(tp));
  if (a.recompute_method.empty() != a.recompute_granularity.empty())
    fail("--recompute-granularity full and --recompute-method go together");
  if (a.min_lr > a.lr) fail("--min-lr is above --lr");
  if (!a.data_path.empty() && !std::filesystem::is_regular_file(a.data_path))
    fail("--data-path " + a.data_path + " is not a readable file");
  if (a.save_interval > 0 && a.save.empty()) fail("--save-interval needs --save DIR");
  if (a.async_save && a.save.empty()) fail("--async-save needs --save DIR");
  return dp;
}

}  // namespace trainer
