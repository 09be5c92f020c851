// The choice among the exporters (P_EXPORTER): console, file or OTLP, for the signals that are on.
#pragma once

#include <memory>
#include <string>

#include "lens/config.h"
#include "signals/exporter.h"

namespace lens::internal {

// The exporter the configuration asks for. Throws ConfigError for one this build cannot provide, or a file
// that cannot be opened.
std::unique_ptr<TelemetryExporter> make_exporter(const Config& config, const std::string& run_id, int rank,
                                                 SignalSet signals);

}  // namespace lens::internal
