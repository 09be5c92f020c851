// What one setup decided, shared by its handles and (in later layers) the pipeline it starts.
#pragma once

#include <atomic>
#include <memory>

#include "lens/telemetry.h"

namespace lens::internal {

struct TelemetryState {
  Config config;
  RankInfo ranks;
  bool exporting = false;
  GroupSet resolved_span_groups;
  std::unique_ptr<Sampler> sampler;  // exporting ranks with traces on
  ResourceAttributes resource_attributes;
  std::atomic<bool> shut_down{false};
};

}  // namespace lens::internal
