// lens/config_error.h: the one exception lens throws for a bad configuration (CONTRACT §2), apart from the rest
// of lens/config.h so that code that only refuses bad input (span groups, ranks, sampling) depends on this alone.
//
//   try {
//     lens::setup_telemetry(lens::Config::from_env("MYTRAINER_OTEL"));
//   } catch (const lens::ConfigError& e) {
//     std::fprintf(stderr, "%s\n", e.what());  // names the variable, the value and what is valid
//   }
#pragma once

#include <stdexcept>

namespace lens {

// A bad configuration value, an unknown name or a misuse found at setup. The message says what was wrong,
// where it came from and what is valid.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lens
