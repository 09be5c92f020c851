// pretrain_gpt's command line: Megatron-LM's flag names, parsed with CLI11, checked before any process group is
// made (a bad or inconsistent value is one clear message on every rank, not a hang in a collective).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainer {

struct Args {
  // Model.
  int num_layers = 4;
  int hidden_size = 64;
  int num_attention_heads = 4;
  std::int64_t seq_length = 64;
  // Batches and schedule.
  int micro_batch_size = 4;
  std::int64_t global_batch_size = 16;
  std::int64_t train_iters = 100;
  double lr = 3e-3;
  double min_lr = 3e-4;
  std::int64_t lr_warmup_iters = 10;
  std::string lr_decay_style = "cosine";
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  // Parallelism.
  int pipeline_model_parallel_size = 1;
  int tensor_model_parallel_size = 1;
  // Activation recomputation (--recompute-granularity full): empty, or "full" with a method, "uniform" or "block".
  std::string recompute_granularity, recompute_method;
  int recompute_num_layers = 1;
  // Data-parallel gradient sync: buckets all-reduced during backward (else after it, as one bucket), and their
  // size in elements (0: Megatron's default, max(40M, 1M x DP)).
  bool overlap_grad_reduce = false;
  std::int64_t ddp_bucket_size = 0;
  std::int64_t seed = 1234;
  // Data, checkpoints, evaluation, logging.
  std::string data_path;  // empty: the project's docs, frozen at configure time
  std::string save, load;
  std::int64_t save_interval = 0;
  bool async_save = false;
  std::int64_t eval_interval = 0;
  std::int64_t eval_iters = 4;
  std::int64_t log_interval = 10;
  bool log_throughput = false;
  // The GPU's peak TFLOP/s for megatron.training.mfu (0: from NVML's device name, docs/GPU.md).
  double peak_tflops = 0;
  bool bf16 = false, fp16 = false;
  std::string ckpt_format = "torch";
  // Telemetry (override the MEGATRON_OTEL_* environment).
  bool otel_enabled = false;
  std::string otel_service_name, otel_span_groups;
  // Testing aid (not Megatron's): rank `testing_slow_rank` sleeps `testing_slow_ms` in every micro-batch's
  // forward, a straggler with a known name for the tests of `lens report` (-1: none).
  int testing_slow_rank = -1;
  double testing_slow_ms = 0;
  std::int64_t testing_slow_from = 1;  // the first iteration slowed: a straggler that appears mid-run
  // And in iteration `testing_stall_iteration` (the step span's megatron.iteration) that rank stops until it is
  // killed, at `testing_stall_in`: micro-batch 1's forward or backward, the optimizer step, or micro-batch 1's forward
  // in the evaluation after that iteration. A hang with a known place, for the tests of hang snapshots and `lens
  // hang` (-1: never).
  std::int64_t testing_stall_iteration = -1;
  std::string testing_stall_in = "forward";
  // Or that rank stops in startup, in process group setup, until it is killed: a death during startup whatever the
  // machine's speed (killed from outside, the rank could otherwise have finished startup first).
  bool testing_stall_startup = false;
  // The rendezvous store's timeout (2 minutes); a rank that never joins is named 20 s before it.
  int testing_rendezvous_timeout_s = 120;
  // A simulated GPU (trainer/simulated_gpu.h): the simulator's path, and each simulated kernel's duration.
  std::string testing_fake_cuda;
  double testing_kernel_us = 500;
  bool testing_startup_times = false;
};

// What was wrong with the command line.
class ArgsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv; --help prints the flags and exits 0. Throws ArgsError for an unknown flag or a bad value.
Args parse_args(int argc, char** argv);

// Checks the values against each other and the world size: the batch must divide into micro-batches across the
// data-parallel ranks, the layers across the pipeline stages, the heads across the hidden size and the
// tensor-parallel ranks, the world across tensor x pipeline parallel; the data file must exist. Returns the
// data-parallel size.
int validate(const Args& args, int world_size);

// Elements per gradient bucket: one bucket for all without --overlap-grad-reduce (returns 0), else
// --ddp-bucket-size or Megatron's default.
inline std::int64_t bucket_elements(const Args& a, int data_parallel_size) {
  if (!a.overlap_grad_reduce) return 0;
  if (a.ddp_bucket_size > 0) return a.ddp_bucket_size;
  return std::max<std::int64_t>(40'000'000, 1'000'000LL * data_parallel_size);
}

// Micro-batches per iteration on each data-parallel rank: global batch / (micro batch x DP).
inline std::int64_t num_microbatches(const Args& a, int data_parallel_size) {
  return a.global_batch_size / (static_cast<std::int64_t>(a.micro_batch_size) * data_parallel_size);
}

}  // namespace trainer
