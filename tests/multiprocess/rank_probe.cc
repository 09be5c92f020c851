// One rank of the multi-process test: sets telemetry up from the environment (torchrun-style variables) and
// prints "rank <R> exports <0|1>". Registers `even_ranks` first, as a consumer with a custom strategy would.
#include <cstdio>

#include "lens/megatron.h"
#include "lens/telemetry.h"

int main() {
  try {
    lens::register_rank_strategy("even_ranks",
                                 [](const lens::RankStrategyInput& in) { return in.ranks.rank % 2 == 0; });
    lens::Telemetry telemetry = lens::setup_telemetry(lens::megatron::config_from_env());
    std::printf("rank %d exports %d groups %s\n", telemetry.ranks().rank, telemetry.is_exporting() ? 1 : 0,
                lens::describe(lens::megatron::catalogue(), lens::enabled_span_groups()).c_str());
    telemetry.shutdown();
    return 0;
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
