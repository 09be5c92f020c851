#include "device/driver_thread.h"

#include <atomic>
#include <utility>

#include "common/log.h"
#include "common/signal_free_thread.h"

namespace lens::internal {

namespace {

struct ApiCounts {
  std::atomic<std::uint64_t> stuck{0};
  std::atomic<bool> said{false};
};
ApiCounts g_counts[2];

ApiCounts& counts_of(DriverApi api) { return g_counts[api == DriverApi::kNvml ? 0 : 1]; }

const char* what_waits(DriverApi api) {
  return api == DriverApi::kNvml ? "GPU metrics (hw.gpu.*) are left out until it returns"
                                 : "device spans wait until it returns";
}

const char* call_of(DriverApi api) { return api == DriverApi::kNvml ? "an NVML" : "a CUDA"; }

}  // namespace

std::uint64_t stuck_driver_calls(DriverApi api) noexcept {
  return counts_of(api).stuck.load(std::memory_order_relaxed);
}

DriverThread& driver_thread(DriverApi api) {
  // Leaked on purpose: a call that never returns keeps its thread, which must never meet a destroyed object.
  if (api == DriverApi::kNvml) {
    static DriverThread* const nvml = new DriverThread(DriverApi::kNvml, "lens-nvml", kDriverCallStuckAfter);
    return *nvml;
  }
  static DriverThread* const cuda = new DriverThread(DriverApi::kCuda, "lens-cuda", kDriverCallStuckAfter);
  return *cuda;
}

struct DriverThread::Shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::function<void()> call;  // set: a call to make
  bool busy = false;           // a call was handed over and has not returned
  bool counted = false;        // the running call was counted as stuck
  bool stop = false;
  bool ended = false;  // the thread's body returned
  std::chrono::steady_clock::time_point started{};
};

DriverThread::DriverThread(DriverApi api, const char* system_name, std::chrono::milliseconds stuck_after)
    : api_(api), stuck_after_(stuck_after), shared_(std::make_shared<Shared>()) {
  thread_ = start_signal_free_thread("a driver-call thread", system_name, [shared = shared_] {
    std::unique_lock lock(shared->mutex);
    for (;;) {
      shared->changed.wait(lock, [&] { return shared->stop || shared->call; });
      if (shared->stop) break;
      std::function<void()> call = std::move(shared->call);
      shared->call = nullptr;
      lock.unlock();
      call();
      lock.lock();
      shared->busy = false;
      shared->changed.notify_all();
    }
    shared->ended = true;
    shared->changed.notify_all();
  });
}

DriverThread::~DriverThread() {
  std::unique_lock lock(shared_->mutex);
  shared_->stop = true;
  shared_->changed.notify_all();
  // A call that never returns keeps the thread: it ends on its own if the call does; the process does not wait.
  if (shared_->changed.wait_for(lock, std::chrono::milliseconds(100), [&] { return shared_->ended; })) {
    lock.unlock();
    thread_.join();
  } else {
    lock.unlock();
    thread_.detach();
  }
}

void DriverThread::count_stuck_locked(std::chrono::steady_clock::time_point now) {
  if (shared_->counted || now - shared_->started < stuck_after_) return;
  shared_->counted = true;
  ApiCounts& counts = counts_of(api_);
  counts.stuck.fetch_add(1, std::memory_order_relaxed);
  if (!counts.said.exchange(true)) {
    log_warning(
        "%s call has not returned for %lld ms (a wedged GPU driver?): it runs on a thread of its own, so "
        "spans, metrics and logs go on; %s (lens.driver.stuck_calls counts such calls)",
        call_of(api_), static_cast<long long>(stuck_after_.count()), what_waits(api_));
  }
}

DriverThread::Result DriverThread::run(std::function<void()> call, std::chrono::milliseconds wait) {
  std::unique_lock lock(shared_->mutex);
  if (shared_->busy) {
    count_stuck_locked(std::chrono::steady_clock::now());
    return Result::kBusy;
  }
  shared_->call = std::move(call);
  shared_->busy = true;
  shared_->counted = false;
  shared_->started = std::chrono::steady_clock::now();
  shared_->changed.notify_all();
  if (wait.count() == 0) return Result::kStarted;
  if (shared_->changed.wait_for(lock, wait, [&] { return !shared_->busy; })) return Result::kDone;
  count_stuck_locked(std::chrono::steady_clock::now());
  return Result::kTimedOut;
}

}  // namespace lens::internal
