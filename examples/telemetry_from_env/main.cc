// A small consumer: sets telemetry up from the environment and the Megatron flags, then runs a toy training
// loop whose every phase sits behind its span group, and prints how often each group's site fired.
//
//   MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=per_step ./telemetry_from_env --iterations 3
//   ./telemetry_from_env --otel-enabled --otel-span-groups all
#include <CLI/CLI.hpp>

#include <array>
#include <cstdio>

#include "lens/lens.h"

namespace mg = lens::megatron::group;

namespace {

struct Sites {
  std::array<long, lens::SpanGroup::kMaxGroups> fired{};
  // Counts a site of `group` when its group is on, as a span site will record a span.
  void site(lens::SpanGroup group) {
    if (LENS_GROUP_ENABLED(group)) ++fired[group.id()];
  }
};

void train(Sites& s, int iterations, int microbatches, int layers) {
  s.site(mg::job);
  s.site(mg::model_init);
  s.site(mg::load_checkpoint);
  s.site(mg::data_loading);
  for (int it = 0; it < iterations; ++it) {
    if (it == 0) s.site(mg::first_iteration);
    s.site(mg::step);
    s.site(mg::forward_backward);
    for (int mb = 0; mb < microbatches; ++mb) {
      s.site(mg::microbatch);
      s.site(mg::communication);
      for (int l = 0; l < layers; ++l) s.site(mg::layer);
      s.site(mg::activation_offload);
    }
    s.site(mg::optimizer);
  }
  s.site(mg::checkpoint);
  s.site(mg::trace_region);
  s.site(mg::evaluate);
  s.site(mg::inference);
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
    if (const lens::Sampler* sampler = telemetry.sampler()) std::printf("sampler: %s\n", sampler->description().c_str());

    Sites sites;
    train(sites, iterations, microbatches, layers);
    const lens::Catalogue catalogue = lens::megatron::catalogue();
    std::printf("%-20s %-4s %s\n", "group", "", "sites fired");
    for (std::uint8_t id = 0; id < catalogue.group_count(); ++id) {
      lens::SpanGroup group(id);
      std::printf("%-20.*s %-4s %ld\n", static_cast<int>(catalogue.group_name(group).size()),
                  catalogue.group_name(group).data(), lens::is_enabled(group) ? "on" : "off", sites.fired[id]);
    }
    telemetry.shutdown();
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
