// Device time for spans: CUDA events recorded on the thread's stream at the start and end of a span of a
// device-timed group, read later by the export thread, which emits for each completed pair a device span whose
// start and end are device times on the host's clock. The training thread only records (cudaStreamIsCapturing and
// cudaEventRecord at each end of the span: no query, no sync); the export thread never waits.
//
//   // setup (telemetry/setup.cc)
//   start_device_timing(cuda_runtime(), device_groups.bits());
//   // the span path (trace/slot_spans.h), where a span of group g opens and ends
//   if (device_timed(g)) slot.device = device_span_start();
//   if (slot.device) device_span_end(slot.device, host_identity);
//   // the export thread (telemetry/pipeline.cc), every cycle
//   poller.poll([&](const DeviceSpan& d) { /* a child span of d.host */ });
//
// Events come from a bounded pool per recording thread (kPairsPerThread pairs, created on first use and kept for the
// process, adopted by a later thread once their thread has ended). A span that finds the pool exhausted, or its
// stream capturing a CUDA graph (recording there would enter the graph), keeps host time only; the skip is counted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "device/cuda_runtime.h"
#include "device/nvtx.h"
#include "lens/context.h"

namespace lens::internal {

// Groups whose spans are timed on the device now (bit = SpanGroup id); 0 while device timing is off. One relaxed
// load at the start of every recorded span.
extern std::atomic<std::uint64_t> g_device_group_bits;

inline bool device_timed(std::uint64_t group_bit) noexcept {
  return (g_device_group_bits.load(std::memory_order_relaxed) & group_bit) != 0;
}

// Turns device timing on for `group_bits` with `cuda` (null or no bits: off), with NVTX ranges where `nvtx` is
// given, and off again.
void start_device_timing(const CudaRuntime* cuda, std::uint64_t group_bits, const Nvtx* nvtx = nullptr) noexcept;
void stop_device_timing() noexcept;
// The runtime device timing uses now, null when it is off.
const CudaRuntime* device_timing_runtime() noexcept;

// The calling thread's stream (lens::set_device_stream); null: the legacy default stream.
void set_thread_device_stream(void* stream) noexcept;
void* thread_device_stream() noexcept;

// ---- the span path -------------------------------------------------------------------------------------------
struct DevicePair;

// Records the start event on the thread's stream; null when skipped (counted) or off.
DevicePair* device_span_start() noexcept;

// What a device span takes from its host span.
struct HostSpanIdentity {
  SpanContext context;
  std::uint16_t group = 0;
  std::string_view name;
  bool name_is_static = false;  // a literal: kept as a pointer, else copied (up to kNameBytes)
};
// Records the end event on the pair's stream and hands the pair to the export thread.
void device_span_end(DevicePair* pair, const HostSpanIdentity& host) noexcept;
// A span whose end is not recorded (truncated at shutdown): its pair goes back to the pool, not emitted.
void device_span_abandon(DevicePair* pair) noexcept;
// NVTX (device/nvtx.h), where loaded: a range pushed on the calling thread at a device-timed span's start (false:
// none), popped at its end on the same thread.
bool device_nvtx_push(std::string_view name, bool nul_terminated) noexcept;
void device_nvtx_pop() noexcept;

// ---- the export thread ---------------------------------------------------------------------------------------
// A completed pair: the host span's identity and the device's start and end, in Unix nanoseconds.
struct DeviceSpan {
  SpanContext host;
  std::uint16_t group = 0;
  std::string_view name;  // the host span's name (valid during the callback)
  int device = 0;         // cuda:N
  std::uint64_t start_unix_nanos = 0, end_unix_nanos = 0;
};

// Device time on the host's clock, for one device: a calibration event recorded on a stream of lens's own (idle, so
// it completes when recorded) with the host time of the record, again every kRecalibrateEvery; a device event's time
// is the latest completed calibration's host time plus cudaEventElapsedTime from it. Export thread only.
class DeviceClock {
 public:
  static constexpr std::chrono::milliseconds kRecalibrateEvery{1000};
  DeviceClock(const CudaRuntime& cuda, int device) noexcept;
  // Moves the calibration on (a pending one completed; a new one due). False while none has completed yet, or when
  // the device could not be calibrated (failed()).
  bool ready(std::chrono::steady_clock::time_point now) noexcept;
  bool failed() const noexcept { return failed_; }
  // The host time of `event` (complete), in Unix nanoseconds; false on an error.
  bool unix_nanos_of(cudaEvent_t event, std::uint64_t* out) const noexcept;
  int device() const noexcept { return device_; }

 private:
  void record(int which, std::chrono::steady_clock::time_point now) noexcept;

  const CudaRuntime& cuda_;
  const int device_;
  bool failed_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[2] = {nullptr, nullptr};
  std::uint64_t host_unix_nanos_[2] = {0, 0};
  int current_ = -1, pending_ = -1;
  std::chrono::steady_clock::time_point last_record_{};
  TimeMap time_;
};

class DevicePoller {
 public:
  using Emit = std::function<void(const DeviceSpan&)>;
  // Made on the thread that polls: its capture mode becomes relaxed, and the spans it records are not device-timed.
  explicit DevicePoller(const CudaRuntime& cuda);
  // Emits every pair whose events completed, never waiting; true while pairs are still outstanding (open or pending).
  bool poll(const Emit& emit);
  // At shutdown: polls until nothing is pending or `until`; a pair still pending then is dropped and counted
  // (incomplete, in device_counts()).
  void finish(std::chrono::steady_clock::time_point until, const Emit& emit);

 private:
  // Emits `pair` when complete; false while it is not.
  bool try_emit(DevicePair& pair, std::chrono::steady_clock::time_point now, const Emit& emit);
  DeviceClock* clock_of(int device);

  const CudaRuntime& cuda_;
  std::vector<std::unique_ptr<DeviceClock>> clocks_;
  std::string name_;  // the name being emitted, when copied
};

// Counts since the process started, for lens.device.skipped and lens.device.dropped.
struct DeviceCounts {
  std::uint64_t skipped_pool_exhausted = 0;  // the thread's pool had no free pair
  std::uint64_t skipped_capturing = 0;       // the stream was capturing a CUDA graph
  std::uint64_t skipped_error = 0;           // the runtime refused a record (a bad stream, another device)
  std::uint64_t dropped_incomplete = 0;      // still pending at shutdown
  std::uint64_t dropped_error = 0;           // the runtime refused a query or an elapsed time
  std::uint64_t emitted = 0;
};
DeviceCounts device_counts() noexcept;

// The pool size, for tests and docs.
inline constexpr std::uint32_t kPairsPerThread = 4096;
inline constexpr std::size_t kNameBytes = 64;

}  // namespace lens::internal
