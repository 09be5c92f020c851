// Device spans, a part of the pipeline beside the span drain and the hang watch: once device timing is on
// (device/device_timing.h), the pipeline's thread calls poll() on each pass, and the event pairs that spans recorded
// and that completed become device spans in the drain. The polls run on a CUDA driver thread of their own
// (device/driver_thread.h), waited for at most a bound, so a wedged cudaEventQuery holds up device spans only.
//
//   DeviceSpanPolling device(spans, export_timeout_ms);
//   device.start(cuda);                    // at setup: device timing is on
//   sleep(device.wait_ms(idle_ms));        // the pipeline's thread, each pass
//   device.poll(stop);                     // before the drain stops: what completes by then is still exported
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "device/cuda_runtime.h"
#include "device/device_timing.h"
#include "trace/span_drain.h"

namespace lens::internal {

class DeviceSpanPolling {
 public:
  // `export_timeout_ms` bounds the wait at stop for the device to finish what spans recorded.
  DeviceSpanPolling(SpanDrain& spans, std::int64_t export_timeout_ms) noexcept;

  // Device timing is on with `cuda` (null: nothing changes), until the pipeline finishes, even after the setup
  // detached. Throws ConfigError when the CUDA driver thread cannot be started (then nothing changed).
  void start(const CudaRuntime* cuda);
  // How long the pipeline's thread may sleep before it polls again: at most `idle_ms`, less while device timing is on.
  std::int64_t wait_ms(std::int64_t idle_ms) const noexcept;
  // Emits the device spans whose events completed; at `stop`, what completes within a bound (then pending pairs are
  // dropped and counted). Does nothing while device timing is off.
  void poll(bool stop);

 private:
  SpanDrain& spans_;
  const std::int64_t finish_ms_;
  std::atomic<const CudaRuntime*> runtime_{nullptr};
  // Made by the first poll, on the CUDA driver thread (it sets that thread's capture mode); it, and the name being
  // built, are touched only there.
  std::optional<DevicePoller> poller_;
  std::string name_;
  std::atomic<bool> outstanding_{false};  // pairs were open or pending at the last poll
};

}  // namespace lens::internal
