// The GPU a rank uses, as metrics read from NVML at each metric collection (docs/METRICS_AND_LOGS.md, "GPU"):
// utilization, memory used and total, power, temperature and SM clock, named by OpenTelemetry's hardware
// conventions where they have a name. Built on exporting ranks with metrics on; NVML's calls run on the thread
// that collects (the pipeline's, or a Prometheus scrape's), never on a training thread.
//
//   std::unique_ptr<GpuMetrics> gpu = GpuMetrics::for_rank(process_env(), local_rank);  // nullptr: no NVML
//   if (gpu) gpu->append(start_unix_nanos, metrics);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/env.h"
#include "lens/resource.h"
#include "resource/nvml.h"
#include "signals/metric_data.h"

namespace lens::internal {

class GpuMetrics {
 public:
  // The GPU of `local_rank` (CUDA_VISIBLE_DEVICES' entry, else local_rank, as for dl.gpu.*); nullptr when NVML or
  // that GPU is not there, which is said once a process (a CPU-only job has no GPU metrics, and is told so).
  static std::unique_ptr<GpuMetrics> for_rank(const EnvLookup& env, int local_rank);
  explicit GpuMetrics(const GpuIdentity& gpu);

  // Appends the readings of this moment; `start_unix_nanos` starts the memory sums. A reading NVML refuses is
  // left out (one collection without it), never a zero.
  void append(std::uint64_t start_unix_nanos, std::vector<MetricData>& out) const;

 private:
  const int index_;
  const MetricAttributes attributes_;  // hw.id, hw.model, hw.type, dl.gpu.index
};

// The metrics of one reading (`append`'s work, apart for its tests).
void append_gpu_sample(const GpuSample& s, const MetricAttributes& gpu, std::uint64_t start_unix_nanos,
                       std::uint64_t now_unix_nanos, std::vector<MetricData>& out);

}  // namespace lens::internal
