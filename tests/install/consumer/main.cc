// A consumer outside the lens tree, built against the installed package.
#include <lens/lens.h>

#include <cstdio>

int main() {
  lens::Config config = lens::megatron::config_from_env();
  config.apply_cli(true, "consumer", "per_step");
  config.exporter = lens::Exporter::kConsole;
  lens::Telemetry telemetry = lens::setup_telemetry(config, {.rank = 0, .world_size = 1});
  bool ok = telemetry.is_exporting() && LENS_GROUP_ENABLED(lens::megatron::group::step) &&
            !LENS_GROUP_ENABLED(lens::megatron::group::layer);
  telemetry.shutdown();
  std::puts(ok ? "consumer: lens works" : "consumer: unexpected state");
  return ok ? 0 : 1;
}
