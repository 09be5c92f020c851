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
}

}  // namespace lens::megatron
