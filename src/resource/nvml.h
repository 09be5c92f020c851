// NVML, loaded with dlopen: the few entry points lens uses, declared here (no nvml.h is needed to build).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lens/resource.h"

namespace lens::internal {

// The number of GPUs NVML sees; nullopt on any failure.
std::optional<int> nvml_device_count();
// The identity of device `index`; nullopt on any failure.
std::optional<GpuIdentity> nvml_device_identity(int index);

// What a GPU is doing now, as NVML reports it; a reading NVML refuses (or a library without its call) is absent.
struct GpuSample {
  std::optional<double> utilization;                       // of the last sample period, 0..1
  std::optional<std::uint64_t> memory_used, memory_total;  // bytes
  std::optional<double> power_watts;
  std::optional<std::int64_t> temperature_celsius;  // the die
  std::optional<std::int64_t> sm_clock_hz;
};
// A reading of device `index`; nullopt when NVML or the device is not there.
std::optional<GpuSample> nvml_device_sample(int index);

// Forgets the loaded library, so a test can load another (LENS_NVML_LIBRARY) in the same process.
void reset_nvml_for_testing();

}  // namespace lens::internal
