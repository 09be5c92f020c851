// The message of the ConfigError that setting up telemetry with `config` throws, or empty when setup succeeds
// (the live setup is then shut down). For tests of what a setup error says and does not say.
#pragma once

#include <string>

#include "lens/telemetry.h"

namespace lens::testing {

inline std::string setup_error(const Config& config) {
  try {
    setup_telemetry(config, {.rank = 0, .world_size = 1, .reinit = true}).shutdown();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace lens::testing
