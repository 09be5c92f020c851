#include "resource/gpu_metrics.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "resource/resource.h"

namespace lens::internal {

namespace {

void say_once(const char* why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) log_info("no GPU metrics (hw.gpu.*): %s", why);
}

}  // namespace

std::unique_ptr<GpuMetrics> GpuMetrics::for_rank(const EnvLookup& env, int local_rank) {
  std::optional<int> index = gpu_index_for(env, local_rank);
  if (!index) {
    say_once("CUDA_VISIBLE_DEVICES names this rank's GPU by UUID or not at all");
    return nullptr;
  }
  if (!nvml_device_count()) {
    say_once("NVML (libnvidia-ml.so.1) is not loadable here");
    return nullptr;
  }
  std::optional<GpuIdentity> gpu = nvml_device_identity(*index);
  if (!gpu) {
    say_once("NVML does not know this rank's GPU");
    return nullptr;
  }
  return std::make_unique<GpuMetrics>(*gpu);
}

GpuMetrics::GpuMetrics(const GpuIdentity& gpu)
    : index_(gpu.index),
      attributes_{{"dl.gpu.index", std::int64_t{gpu.index}},
                  {"hw.id", gpu.uuid},
                  {"hw.model", gpu.name},
                  {"hw.type", std::string("gpu")}},
      nvml_(driver_thread(DriverApi::kNvml)) {}

void GpuMetrics::append(std::uint64_t start_unix_nanos, std::vector<MetricData>& out) const {
  // Owned by the call, which outlives this frame when NVML does not return.
  auto reading = std::make_shared<std::optional<GpuSample>>();
  const bool read = nvml_.run([reading, index = index_] { *reading = nvml_device_sample(index); }, kReadingWait) ==
                    DriverThread::Result::kDone;
  const std::uint64_t now = unix_nanos_now();
  if (read && *reading) {
    if (int dropped = drop_readings_out_of_range(**reading); dropped > 0)
      out_of_range_.fetch_add(static_cast<std::uint64_t>(dropped), std::memory_order_relaxed);
    append_gpu_sample(**reading, attributes_, start_unix_nanos, now, out);
  }
  if (std::uint64_t dropped = out_of_range_.load(std::memory_order_relaxed); dropped > 0) {
    MetricData d{"lens.gpu.readings.dropped",
                 "{reading}",
                 "GPU readings left out, by reason.",
                 InstrumentKind::kCounter,
                 true,
                 true,
                 false,
                 {},
                 {}};
    MetricAttributes attributes = attributes_;
    attributes.emplace_back("reason", std::string("out_of_range"));
    std::sort(attributes.begin(), attributes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    MetricPoint p = point_at(start_unix_nanos, now, attributes);
    p.int_value = static_cast<std::int64_t>(dropped);
    d.points.push_back(std::move(p));
    out.push_back(std::move(d));
  }
}

int drop_readings_out_of_range(GpuSample& s) {
  // Bounds no GPU reaches (the largest draw about 1.2 kW, run hotter than about 100 C or clock past 3 GHz), wide
  // enough never to drop a true reading; NVML's unsigned values past them are garbage (a driver fault, a wrap).
  constexpr double kMaxWatts = 10'000;
  constexpr std::int64_t kMaxCelsius = 200;
  constexpr std::int64_t kMaxSmClockHz = 10'000'000'000;
  int dropped = 0;
  auto drop_if = [&](auto& reading, bool out_of_range) {
    if (reading && out_of_range) {
      reading.reset();
      ++dropped;
    }
  };
  drop_if(s.utilization, s.utilization && !(*s.utilization >= 0.0 && *s.utilization <= 1.0));
  const bool memory_wrong = s.memory_used && s.memory_total && *s.memory_used > *s.memory_total;
  drop_if(s.memory_used, memory_wrong);
  drop_if(s.memory_total, memory_wrong);
  drop_if(s.power_watts, s.power_watts && !(*s.power_watts >= 0.0 && *s.power_watts <= kMaxWatts));
  drop_if(s.temperature_celsius, s.temperature_celsius && *s.temperature_celsius > kMaxCelsius);
  drop_if(s.sm_clock_hz, s.sm_clock_hz && *s.sm_clock_hz > kMaxSmClockHz);
  return dropped;
}

void append_gpu_sample(const GpuSample& s, const MetricAttributes& gpu, std::uint64_t start_unix_nanos,
                       std::uint64_t now_unix_nanos, std::vector<MetricData>& out) {
  // A gauge has no start; the memory sums (UpDownCounters, as the conventions make them) start with the pipeline.
  auto gauge = [&](const char* name, const char* unit, const char* description, auto value,
                   const MetricAttributes& attributes) {
    constexpr bool kInteger = std::is_integral_v<decltype(value)>;
    MetricData d{name, unit, description, InstrumentKind::kGauge, kInteger, false, false, {}, {}};
    MetricPoint p = point_at(0, now_unix_nanos, attributes);
    if constexpr (kInteger)
      p.int_value = value;
    else
      p.double_value = value;
    d.points.push_back(std::move(p));
    out.push_back(std::move(d));
  };
  auto sum = [&](const char* name, const char* description, std::uint64_t bytes) {
    MetricData d{name, "By", description, InstrumentKind::kUpDownCounter, true, false, false, {}, {}};
    MetricPoint p = point_at(start_unix_nanos, now_unix_nanos, gpu);
    p.int_value = static_cast<std::int64_t>(bytes);
    d.points.push_back(std::move(p));
    out.push_back(std::move(d));
  };
  if (s.utilization) {
    MetricAttributes general = gpu;
    general.emplace_back("hw.gpu.task", std::string("general"));
    std::sort(general.begin(), general.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    gauge("hw.gpu.utilization", "1", "Fraction of the last sample period a kernel ran on the GPU.", *s.utilization,
          general);
  }
  if (s.memory_used) sum("hw.gpu.memory.usage", "GPU memory in use.", *s.memory_used);
  if (s.memory_total) sum("hw.gpu.memory.limit", "GPU memory in all.", *s.memory_total);
  if (s.power_watts) gauge("hw.power", "W", "The GPU's power draw.", *s.power_watts, gpu);
  if (s.temperature_celsius) gauge("hw.temperature", "Cel", "The GPU die's temperature.", *s.temperature_celsius, gpu);
  if (s.sm_clock_hz) gauge("dl.gpu.clock.sm", "Hz", "The GPU's SM clock.", *s.sm_clock_hz, gpu);
}

}  // namespace lens::internal
