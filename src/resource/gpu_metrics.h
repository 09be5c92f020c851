// The GPU a rank uses, as metrics read from NVML at each metric collection (docs/METRICS_AND_LOGS.md, "GPU"):
// utilization, memory used and total, power, temperature and SM clock, named by OpenTelemetry's hardware
// conventions where they have a name. Built on exporting ranks with metrics on. NVML's calls run on a thread of the
// process's own (device/driver_thread.h): the thread that collects (the pipeline's, or a Prometheus scrape's)
// waits for a reading at most kReadingWait, so a wedged driver leaves the GPU metrics out, never the others. A
// reading outside what a GPU can report (a utilization over 100 %, more memory used than there is, a power, a
// temperature or a clock no GPU reaches) is left out and counted: lens.gpu.readings.dropped{reason=out_of_range}.
//
//   std::unique_ptr<GpuMetrics> gpu = GpuMetrics::for_rank(process_env(), local_rank);  // nullptr: no NVML
//   if (gpu) gpu->append(start_unix_nanos, metrics);
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/env.h"
#include "device/driver_thread.h"
#include "lens/resource.h"
#include "resource/nvml.h"
#include "signals/metric_data.h"

namespace lens::internal {

class GpuMetrics {
 public:
  static constexpr std::chrono::milliseconds kReadingWait = kDriverCallStuckAfter;

  // The GPU of `local_rank` (CUDA_VISIBLE_DEVICES' entry, else local_rank, as for dl.gpu.*); nullptr when NVML or
  // that GPU is not there, which is said once a process (a CPU-only job has no GPU metrics, and is told so).
  // Throws ConfigError when NVML's thread cannot be started.
  static std::unique_ptr<GpuMetrics> for_rank(const EnvLookup& env, int local_rank);
  explicit GpuMetrics(const GpuIdentity& gpu);

  // Appends the readings of this moment; `start_unix_nanos` starts the memory sums and the count of readings
  // dropped. A reading NVML refuses is left out (one collection without it), never a zero; so is every reading of
  // a collection whose NVML call has not returned within kReadingWait (or whose earlier call still has not).
  void append(std::uint64_t start_unix_nanos, std::vector<MetricData>& out) const;

 private:
  const int index_;
  const MetricAttributes attributes_;  // hw.id, hw.model, hw.type, dl.gpu.index
  DriverThread& nvml_;                 // the process's (driver_thread)
  mutable std::atomic<std::uint64_t> out_of_range_{0};
};

// Leaves out each reading of `s` that no GPU can report; returns how many it left out.
int drop_readings_out_of_range(GpuSample& s);

// The metrics of one reading (`append`'s work, apart for its tests).
void append_gpu_sample(const GpuSample& s, const MetricAttributes& gpu, std::uint64_t start_unix_nanos,
                       std::uint64_t now_unix_nanos, std::vector<MetricData>& out);

}  // namespace lens::internal
