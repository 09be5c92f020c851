// Setup with an injected exporter (tests), and the pieces the process hooks share with setup.
#pragma once

#include <chrono>
#include <memory>

#include "lens/telemetry.h"
#include "signals/exporter.h"

namespace lens::internal {

struct TelemetryState;

// setup_telemetry with `exporter` instead of the one the configuration names (when not null).
Telemetry setup(const Config& config, SetupOptions options, std::unique_ptr<TelemetryExporter> exporter);

bool shutdown_state(const std::shared_ptr<TelemetryState>& state, std::chrono::milliseconds timeout);

// pthread_atfork child: telemetry is off in the child until it sets up again.
void forget_live_setup_after_fork() noexcept;

}  // namespace lens::internal
