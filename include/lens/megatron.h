// lens/megatron.h: the ready-made extension for Megatron-style trainers.
//
// The Megatron catalogue adds 8 groups to the base 8 (CONTRACT §1) and replaces the presets: `default` is the
// production set, `per_step` adds one span per iteration phase, `all` (aliases `profiling`, `full`) everything
// down to each layer of each micro-batch. Configuration is read under the MEGATRON_OTEL prefix with NEMO_LENS as
// fallback, and the service name defaults to `megatron-lm`.
//
//   lens::Config config = lens::megatron::config_from_env();
//   config.apply_cli(args.otel_enabled, args.otel_service_name, args.otel_span_groups);
//   lens::Telemetry telemetry = lens::setup_telemetry(config);
//   if (LENS_GROUP_ENABLED(lens::megatron::group::layer)) { ... }
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "lens/config.h"
#include "lens/groups.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace lens::megatron {

inline constexpr std::string_view kEnvPrefix = "MEGATRON_OTEL";
inline constexpr std::string_view kDefaultServiceName = "megatron-lm";

// The Megatron groups beyond the base 8 (lens::group::*), in catalogue order.
namespace group {
using namespace ::lens::group;  // lens::megatron::group::step works too
inline constexpr SpanGroup microbatch{8};
inline constexpr SpanGroup layer{9};
inline constexpr SpanGroup communication{10};
inline constexpr SpanGroup activation_offload{11};
inline constexpr SpanGroup data_loading{12};
inline constexpr SpanGroup first_iteration{13};
inline constexpr SpanGroup trace_region{14};
inline constexpr SpanGroup inference{15};
}  // namespace group

constexpr Catalogue catalogue() {
  Catalogue c = base_catalogue();
  for (std::string_view name : {"microbatch", "layer", "communication", "activation_offload", "data_loading",
                                "first_iteration", "trace_region", "inference"})
    c.add_group(name);
  c.clear_presets();
  const GroupSet production{group::job, group::checkpoint, group::evaluate, group::first_iteration, group::inference};
  c.set_preset("default", production);
  c.set_preset("per_step",
               production | GroupSet{group::model_init, group::load_checkpoint, group::step, group::forward_backward,
                                     group::optimizer, group::communication, group::data_loading});
  for (std::string_view name : {"all", "profiling", "full"}) c.set_preset(name, c.all());
  return c;
}

static_assert(catalogue().group_count() == 16, "the Megatron catalogue has 16 groups");

// The names of the spans that SPAN_NAMES renames (CONTRACT §6); the others are the same in both modes. Literals,
// kept by pointer. With kMegatron they are the names Megatron-LM's code exports, so queries written against real
// Megatron output find lens's spans.
//
//   const lens::megatron::SpanNames& names = lens::megatron::span_names(config.span_names);
//   LENS_SPAN(lens::megatron::group::model_init, names.model_init, {lens::megatron::kGoodput});
struct SpanNames {
  TextArg model_init, load_checkpoint, load_checkpoint_io_read, data_loading, train_step, forward_backward,
      optimizer_step, save_checkpoint, save_checkpoint_state_dict, save_checkpoint_io_write;
  TextArg num_microbatches_key;  // the forward_backward span's micro-batch count attribute
};
inline constexpr SpanNames kDocumentedSpanNames{"megatron.model_init",
                                                "megatron.load_checkpoint",
                                                "megatron.load_checkpoint.io_read",
                                                "megatron.data_loading",
                                                "megatron.train_step",
                                                "megatron.forward_backward",
                                                "megatron.optimizer_step",
                                                "megatron.save_checkpoint",
                                                "megatron.save_checkpoint.state_dict",
                                                "megatron.save_checkpoint.io_write",
                                                "megatron.num_microbatches"};
inline constexpr SpanNames kMegatronSpanNames{
    "megatron.startup.model_init",        "megatron.checkpoint.load", "megatron.checkpoint.load.io_read",
    "megatron.startup.dataloader",        "megatron.train.iteration", "megatron.train.iteration.forward_backward",
    "megatron.train.iteration.optimizer", "megatron.checkpoint.save", "megatron.checkpoint.save.state_dict",
    "megatron.checkpoint.save.io_write",  "num_microbatches"};
constexpr const SpanNames& span_names(SpanNaming naming) {
  return naming == SpanNaming::kMegatron ? kMegatronSpanNames : kDocumentedSpanNames;
}

// `is_goodput_span=true`, on the spans that count toward goodput in both modes: the job (megatron.pretrain,
// megatron.train), startup, model init, checkpoint load and save, the data loader, the first iteration and each
// train step.
inline constexpr Attribute kGoodput{"is_goodput_span", true};
static_assert(catalogue().group_name(group::inference) == "inference", "group constants follow catalogue order");

// A rank's place in the three parallel dimensions (Megatron's parallel_state ranks), for the resource's
// dl.tensor_parallel.rank, dl.pipeline_parallel.rank and dl.data_parallel.rank (lens's addition: Megatron's resource
// names only the sizes).
struct ParallelRanks {
  int tensor = 0, pipeline = 0, data = 0;
};

// What the Megatron resource attributes are built from: the trainer's arguments.
struct TrainingArgs {
  int local_rank = 0;
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int data_parallel_size = 1;
  std::int64_t global_batch_size = 0;
  std::int64_t seq_length = 0;
  int num_layers = 0;
  int hidden_size = 0;
  int num_attention_heads = 0;
  std::int64_t train_iters = 0;
  int micro_batch_size = 0;
  std::string ckpt_format;
  bool fp16 = false;
  bool bf16 = false;
  std::optional<ParallelRanks> ranks{};  // none: the resource names the sizes only
};

// The Megatron consumer attributes of CONTRACT §5: dl.*, megatron.*, the GPU identity (NVML), copies of the SLURM
// ids, and the job and run uuids. One function for the trainer and its checkpoint worker, so the two never
// drift apart. Touches NVML: call it only on an exporting rank (resource_provider() does).
#if !defined(LENS_DISABLED)
LENS_API ResourceAttributes resource_attributes(const TrainingArgs& args);
#else
inline ResourceAttributes resource_attributes(const TrainingArgs&) { return {}; }
#endif

// SetupOptions{.resource_provider = lens::megatron::resource_provider(args)}: the attributes, built only where
// they are exported.
inline std::function<ResourceAttributes()> resource_provider(TrainingArgs args) {
  return [args = std::move(args)] { return resource_attributes(args); };
}

// One log interval's training metrics; what is absent is not recorded.
struct TrainingMetrics {
  std::optional<double> step_duration_ms{};     // megatron.training.step_duration_ms (histogram, ms)
  std::optional<double> loss{};                 // megatron.training.loss (gauge)
  std::optional<double> throughput_tflops{};    // megatron.training.throughput_tflops (gauge)
  std::optional<double> grad_norm{};            // megatron.training.grad_norm (gauge)
  std::optional<std::int64_t> skipped_iters{};  // megatron.training.skipped_iters (counter: added)
  std::optional<double> learning_rate{};        // megatron.training.learning_rate (gauge)
  std::optional<double> tokens_per_sec{};       // megatron.training.tokens_per_sec (gauge)
  std::optional<double> memory_allocated_gb{};  // megatron.training.memory_allocated_gb (gauge)
  std::optional<double> mfu{};                  // megatron.training.mfu (gauge, 0-1): throughput over the GPU's peak
};

// A GPU's peak dense tensor throughput for half-precision (BF16/FP16) training, in TFLOP/s, by NVML's device name
// (e.g. "NVIDIA H100 80GB HBM3"), from NVIDIA's data sheets for current data-centre GPUs (docs/GPU.md lists them);
// nullopt for a GPU not in the table, or for fp32 training (give the peak: --peak-tflops).
//
//   if (auto peak = lens::megatron::peak_tflops(gpu->name, args.bf16 || args.fp16)) metrics.mfu = tflops / *peak;
#if !defined(LENS_DISABLED)
LENS_API std::optional<double> peak_tflops(std::string_view device_name, bool half_precision);
#else
inline std::optional<double> peak_tflops(std::string_view, bool) { return std::nullopt; }
#endif

// Records the nine megatron.training.* instruments of CONTRACT §8 (exact names, kinds, units, descriptions), no
// metric attributes: identity rides the resource. Call it every --log-interval iterations.
#if !defined(LENS_DISABLED)
LENS_API void record_training_metrics(const TrainingMetrics& metrics);
#else
inline void record_training_metrics(const TrainingMetrics&) {}
#endif

// Config::from_env with the Megatron prefix, the NEMO_LENS fallback, `megatron-lm` and the Megatron catalogue.
inline Config config_from_env() {
  return Config::from_env(kEnvPrefix, kFallbackEnvPrefix, kDefaultServiceName, catalogue());
}

}  // namespace lens::megatron

// A span named after the marker in the `trace_region` group, for fine sub-phases (checkpoint, dataset, load).
#define LENS_TRACE_REGION(name) LENS_SPAN(::lens::megatron::group::trace_region, name)
