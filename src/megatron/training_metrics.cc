#include <optional>
#include <string_view>

#include "lens/megatron.h"
#include "lens/metrics.h"

namespace lens::megatron {

namespace {

struct Instruments {
  metrics::Histogram<double> step_duration =
      metrics::histogram<double>("megatron.training.step_duration_ms",
                                 {.description = "Duration of one training step in milliseconds.", .unit = "ms"});
  metrics::Gauge<double> loss =
      metrics::gauge<double>("megatron.training.loss", {.description = "Training loss value at each log interval."});
  metrics::Gauge<double> throughput = metrics::gauge<double>("megatron.training.throughput_tflops",
                                                             {.description = "Training throughput in TFLOP/s/GPU."});
  metrics::Gauge<double> grad_norm =
      metrics::gauge<double>("megatron.training.grad_norm", {.description = "Global gradient norm."});
  metrics::Counter<std::int64_t> skipped = metrics::counter<std::int64_t>(
      "megatron.training.skipped_iters", {.description = "Number of training iterations skipped."});
  metrics::Gauge<double> learning_rate =
      metrics::gauge<double>("megatron.training.learning_rate", {.description = "Current learning rate."});
  metrics::Gauge<double> tokens_per_sec = metrics::gauge<double>(
      "megatron.training.tokens_per_sec", {.description = "Training throughput in tokens/second."});
  metrics::Gauge<double> memory =
      metrics::gauge<double>("megatron.training.memory_allocated_gb", {.description = "Peak memory allocated in GB."});
  metrics::Gauge<double> mfu = metrics::gauge<double>(
      "megatron.training.mfu",
      {.description = "Model FLOPs utilization: the model's TFLOP/s/GPU over the GPU's peak (0-1).", .unit = "1"});
};

// Dense BF16/FP16 tensor-core peaks (TFLOP/s) from NVIDIA's data sheets (the "with sparsity" figure halved), matched
// on NVML's device name; the more specific name first.
struct Peak {
  std::string_view name_part;
  double tflops;
};
constexpr Peak kHalfPrecisionPeaks[] = {
    {"GB200", 2500},      // GB200 NVL72: 5 PFLOPS FP16/BF16 per GPU with sparsity
    {"B200", 2250},       // HGX B200: 4.5 PFLOPS with sparsity
    {"H200", 989.5},      // H200 SXM: 1,979 TFLOPS with sparsity (as H100 SXM)
    {"H100 PCIe", 756},   // H100 PCIe: 1,513 with sparsity
    {"H100 NVL", 835.5},  // H100 NVL: 1,671 with sparsity
    {"H100", 989.5},      // H100 SXM: 1,979 with sparsity
    {"A100", 312},        // A100: 624 with sparsity
    {"L40S", 362},        // L40S: 733 with sparsity (362.05 dense)
    {"V100-PCIE", 112},   // V100 PCIe: 112 tensor TFLOPS (no sparsity)
    {"V100", 125},        // V100 SXM2: 125
};

Instruments& instruments() {
  static auto* i = new Instruments;  // created on first use, never destroyed (recorded from any thread)
  return *i;
}

}  // namespace

void record_training_metrics(const TrainingMetrics& m) {
  Instruments& i = instruments();
  if (m.step_duration_ms) i.step_duration.record(*m.step_duration_ms);
  if (m.loss) i.loss.record(*m.loss);
  if (m.throughput_tflops) i.throughput.record(*m.throughput_tflops);
  if (m.grad_norm) i.grad_norm.record(*m.grad_norm);
  if (m.skipped_iters) i.skipped.add(*m.skipped_iters);
  if (m.learning_rate) i.learning_rate.record(*m.learning_rate);
  if (m.tokens_per_sec) i.tokens_per_sec.record(*m.tokens_per_sec);
  if (m.memory_allocated_gb) i.memory.record(*m.memory_allocated_gb);
  if (m.mfu) i.mfu.record(*m.mfu);
}

std::optional<double> peak_tflops(std::string_view device_name, bool half_precision) {
  if (!half_precision) return std::nullopt;
  for (const Peak& p : kHalfPrecisionPeaks)
    if (device_name.find(p.name_part) != std::string_view::npos) return p.tflops;
  return std::nullopt;
}

}  // namespace lens::megatron
