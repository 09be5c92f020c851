// The choice among the exporters: the lens key EXPORTER (console, file or OTLP) for every signal, unless
// OTEL_<SIGNAL>_EXPORTER names another for that signal; signals that go to different places get one exporter
// each behind a router.
#pragma once

#include <memory>
#include <string>

#include "lens/config.h"
#include "signals/exporter.h"

namespace lens::internal {

// The exporter the configuration asks for, for the signals in `signals`. Throws ConfigError for one this build
// cannot provide, or a file that cannot be opened.
std::unique_ptr<TelemetryExporter> make_exporter(const Config& config, const std::string& run_id, int rank,
                                                 SignalSet signals);

}  // namespace lens::internal
