#include "trace/device_span_polling.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>

#include "device/driver_thread.h"

namespace lens::internal {

namespace {

// While pairs are outstanding the pipeline's thread polls this often, and at least this often when none are (a pool
// of kPairsPerThread pairs then lasts through 40,000 device spans a second).
constexpr std::int64_t kPollMs = 10;
constexpr std::int64_t kIdlePollMs = 100;
// At stop, how long to wait for the device to finish what spans recorded (the export timeout when shorter).
constexpr std::int64_t kFinishMs = 1000;
// How long one poll is waited for (microseconds, unless the driver is wedged).
constexpr std::chrono::milliseconds kPollWait{200};

// A device span: a child of its host span named `<host name>.device`, carrying lens.device=cuda:N.
void emit_device_span(SpanDrain& spans, const DeviceSpan& d, std::string& name) {
  name.assign(d.name);
  name += ".device";
  char device[24];
  std::snprintf(device, sizeof device, "cuda:%d", d.device);
  const Attribute attributes[] = {{"lens.device", std::string_view(device)}};
  record_device_span(spans, d, SpanName(name), attributes);
}

}  // namespace

DeviceSpanPolling::DeviceSpanPolling(SpanDrain& spans, std::int64_t export_timeout_ms) noexcept
    : spans_(spans), finish_ms_(std::min(kFinishMs, export_timeout_ms)) {}

void DeviceSpanPolling::start(const CudaRuntime* cuda) {
  if (cuda != nullptr) driver_thread(DriverApi::kCuda);  // started here, where an error can still be a ConfigError
  runtime_.store(cuda, std::memory_order_release);
}

std::int64_t DeviceSpanPolling::wait_ms(std::int64_t idle_ms) const noexcept {
  if (runtime_.load(std::memory_order_acquire) == nullptr) return idle_ms;
  return std::min(idle_ms, outstanding_.load(std::memory_order_relaxed) ? kPollMs : kIdlePollMs);
}

void DeviceSpanPolling::poll(bool stop) {
  const CudaRuntime* cuda = runtime_.load(std::memory_order_acquire);
  if (cuda == nullptr) return;
  // The pipeline, and so this part, is never freed: the call may keep `this` when it outlives the wait.
  driver_thread(DriverApi::kCuda)
      .run(
          [this, cuda, stop] {
            if (!poller_) poller_.emplace(*cuda);
            const DevicePoller::Emit emit = [this](const DeviceSpan& d) { emit_device_span(spans_, d, name_); };
            if (stop)
              poller_->finish(std::chrono::steady_clock::now() + std::chrono::milliseconds(finish_ms_), emit);
            else
              outstanding_.store(poller_->poll(emit), std::memory_order_relaxed);
          },
          stop ? std::chrono::milliseconds(finish_ms_) + kPollWait : kPollWait);
}

}  // namespace lens::internal
