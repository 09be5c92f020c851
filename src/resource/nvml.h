// NVML, loaded with dlopen: the few entry points lens uses, declared here (no nvml.h is needed to build).
#pragma once

#include <optional>
#include <string>

#include "lens/resource.h"

namespace lens::internal {

// The number of GPUs NVML sees; nullopt on any failure.
std::optional<int> nvml_device_count();
// The identity of device `index`; nullopt on any failure.
std::optional<GpuIdentity> nvml_device_identity(int index);

// Forgets the loaded library, so a test can load another (LENS_NVML_LIBRARY) in the same process.
void reset_nvml_for_testing();

}  // namespace lens::internal
