// One rank of the multi-process test: sets telemetry up from the environment (torchrun-style variables) and
// prints "rank <R> exports <0|1> groups <enabled>; sites <groups whose span sites run>" (the enabled groups and,
// with hang snapshots on, the groups kept as positions). Registers `even_ranks` first, as a consumer with a custom
// strategy would.
#include <cstdint>
#include <cstdio>

#include "lens/megatron.h"
#include "lens/telemetry.h"

int main() {
  try {
    lens::register_rank_strategy("even_ranks",
                                 [](const lens::RankStrategyInput& in) { return in.ranks.rank % 2 == 0; });
    lens::Telemetry telemetry = lens::setup_telemetry(lens::megatron::config_from_env());
    const lens::Catalogue catalogue = lens::megatron::catalogue();
    lens::GroupSet sites;
    for (std::size_t i = 0; i < catalogue.group_count(); ++i)
      if (const lens::SpanGroup g(static_cast<std::uint8_t>(i)); LENS_GROUP_ENABLED(g))
        sites = sites | lens::GroupSet{g};
    std::printf("rank %d exports %d groups %s; sites %s\n", telemetry.ranks().rank, telemetry.is_exporting() ? 1 : 0,
                lens::describe(catalogue, lens::enabled_span_groups()).c_str(),
                lens::describe(catalogue, sites).c_str());
    telemetry.shutdown();
    return 0;
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
