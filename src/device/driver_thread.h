// A thread of its own for GPU driver calls (NVML's readings, CUDA's event queries), which a wedged driver may never
// return from: the thread that asks (the export thread, a Prometheus scrape) waits at most a bound, so spans,
// metrics and logs keep flowing whatever the driver does. One call at a time; while one has not returned, later
// ones are refused at once. A call running past `stuck_after` is counted once (lens.driver.stuck_calls{api}) and said
// once a process for its API.
//
//   DriverThread& nvml = driver_thread(DriverApi::kNvml);
//   auto reading = std::make_shared<std::optional<GpuSample>>();  // outlives this frame if the call never returns
//   if (nvml.run([reading, index] { *reading = nvml_device_sample(index); }, nvml.stuck_after()) ==
//       DriverThread::Result::kDone)
//     use(*reading);
//
// The process has one such thread an API (driver_thread), started by the setup that first needs it, since the
// driver is the process's: a call wedged under one setup still holds it under the next.
//
// A call must own what it touches (copies, shared_ptrs, or objects that are never freed): one that does not return
// in time runs on after the caller has moved on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace lens::internal {

enum class DriverApi { kNvml, kCuda };

// Driver calls of `api` that ran past their bound since the process started.
std::uint64_t stuck_driver_calls(DriverApi api) noexcept;

class DriverThread;
// The process's thread for `api` (lens-nvml, lens-cuda), started on first use (ConfigError when it cannot be) and
// never ended; a call counts as stuck after kDriverCallStuckAfter.
inline constexpr std::chrono::milliseconds kDriverCallStuckAfter{2000};
DriverThread& driver_thread(DriverApi api);

class DriverThread {
 public:
  enum class Result {
    kDone,      // the call returned within the wait
    kStarted,   // a wait of 0: the call runs on its own
    kTimedOut,  // it did not return within the wait; it runs on
    kBusy,      // an earlier call has not returned: this one was not made
  };

  // `system_name`: the thread's name (15 characters at most). Throws ConfigError when no thread can be started.
  DriverThread(DriverApi api, const char* system_name, std::chrono::milliseconds stuck_after);
  // Joins the thread when it is idle, else leaves it to end on its own when its call returns.
  ~DriverThread();
  DriverThread(const DriverThread&) = delete;
  DriverThread& operator=(const DriverThread&) = delete;

  Result run(std::function<void()> call, std::chrono::milliseconds wait);
  std::chrono::milliseconds stuck_after() const noexcept { return stuck_after_; }

 private:
  struct Shared;  // the call, its state and the stop flag: shared with the thread, which may outlive this object
  void count_stuck_locked(std::chrono::steady_clock::time_point now);

  const DriverApi api_;
  const std::chrono::milliseconds stuck_after_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace lens::internal
