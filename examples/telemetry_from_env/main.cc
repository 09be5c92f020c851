// A small consumer: sets telemetry up from the environment and the Megatron flags, then runs a toy training
// loop whose every phase is a span in its group, and says where the spans went.
//
//   MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=per_step ./telemetry_from_env --iterations 3
//   ./telemetry_from_env --otel-enabled --otel-span-groups all
#include <CLI/CLI.hpp>
#include <cstdio>

#include "lens/lens.h"

namespace mg = lens::megatron::group;

namespace {

// A toy training run whose every phase is a span of its CONTRACT §6 name and group.
void train(int iterations, int microbatches, int layers) {
  LENS_SPAN(mg::job, "megatron.pretrain", {"megatron.train_iters", iterations});
  { LENS_SPAN(mg::model_init, "megatron.model_init"); }
  {
    LENS_SPAN(mg::load_checkpoint, "megatron.load_checkpoint");
    LENS_TRACE_REGION("load_checkpoint.read_index");
  }
  { LENS_SPAN(mg::data_loading, "megatron.data_loading"); }
  LENS_SPAN(mg::job, "megatron.train", {"megatron.train_iters", iterations});
  for (int it = 0; it < iterations; ++it) {
    LENS_SPAN_IF(it == 0, mg::first_iteration, "megatron.train.first_iteration", {"megatron.iteration", it});
    LENS_SPAN_NAMED(step, mg::step, "megatron.train_step", {"megatron.iteration", it});
    {
      LENS_SPAN(mg::forward_backward, "megatron.forward_backward", {"megatron.num_microbatches", microbatches});
      for (int mb = 0; mb < microbatches; ++mb) {
        LENS_SPAN(mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", mb});
        { LENS_SPAN(mg::communication, "megatron.p2p.recv_forward"); }
        for (int l = 0; l < layers; ++l) {
          LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", l + 1});
          { LENS_SPAN(mg::layer, "megatron.layer.self_attention"); }
          { LENS_SPAN(mg::layer, "megatron.layer.mlp"); }
        }
        { LENS_SPAN(mg::activation_offload, "megatron.activation.offload"); }
      }
    }
    { LENS_SPAN(mg::communication, "megatron.grad_sync.start"); }
    { LENS_SPAN(mg::optimizer, "megatron.optimizer_step", {"megatron.update_successful", true}); }
    step.set_attributes({{"megatron.loss", 2.5 - 0.1 * it}, {"megatron.grad_norm", 1.0}});
  }
  {
    LENS_SPAN(mg::checkpoint, "megatron.save_checkpoint", {"megatron.iteration", iterations});
    LENS_TRACE_REGION("save_checkpoint.write_shards");
  }
  {
    LENS_SPAN(mg::evaluate, "megatron.evaluate", {"megatron.eval_iters", 1});
    { LENS_SPAN(mg::evaluate, "megatron.evaluate.step"); }
  }
  { LENS_SPAN(mg::inference, "megatron.inference"); }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lens example: telemetry from the environment"};
  bool otel_enabled = false;
  std::string service_name, span_groups;
  int iterations = 4, microbatches = 2, layers = 3;
  app.add_flag("--otel-enabled", otel_enabled, "turn telemetry on");
  app.add_option("--otel-service-name", service_name, "service name");
  app.add_option("--otel-span-groups", span_groups, "span-group spec");
  app.add_option("--iterations", iterations, "training iterations")->check(CLI::NonNegativeNumber);
  app.add_option("--microbatches", microbatches, "micro-batches per iteration")->check(CLI::NonNegativeNumber);
  app.add_option("--layers", layers, "layers")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    lens::Config config = lens::megatron::config_from_env();
    config.apply_cli(otel_enabled, service_name, span_groups);
    lens::Telemetry telemetry = lens::setup_telemetry(config);
    std::printf("lens config: %s\n", config.summary().c_str());
    lens::RankInfo ranks = telemetry.ranks();
    std::printf("rank %d of %d (local %d), exporting: %s\n", ranks.rank, ranks.world_size, ranks.local_rank,
                telemetry.is_exporting() ? "yes" : "no");
    if (const lens::Sampler* sampler = telemetry.sampler())
      std::printf("sampler: %s\n", sampler->description().c_str());

    train(iterations, microbatches, layers);
    const lens::Catalogue catalogue = lens::megatron::catalogue();
    std::printf("span groups on: %s\n", lens::describe(catalogue, lens::enabled_span_groups()).c_str());
    telemetry.shutdown();
    lens::SpanStats stats = telemetry.span_stats();
    std::printf("spans: %llu recorded, %llu exported, %llu dropped\n", static_cast<unsigned long long>(stats.produced),
                static_cast<unsigned long long>(stats.exported), static_cast<unsigned long long>(stats.dropped()));
    if (config.exporter == lens::Exporter::kFile && stats.exported > 0)
      std::printf("traces: %s/%s/rank%d.traces.jsonl\n", config.file_dir.c_str(), telemetry.run_id().c_str(),
                  ranks.rank);
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
