#include "hang/hang_watch.h"

#include <algorithm>

#include "common/clock.h"
#include "common/signal_free_thread.h"

namespace lens::internal {

void HangWatch::start() {
  if (!on() || thread_.joinable()) return;
  thread_ = start_signal_free_thread("the hang watch thread", "lens-hang",
                                     [this] { run(); });  // the hang signal rings wake_ from another thread
}

void HangWatch::request_snapshot() noexcept {
  if (!on() || stopped_.load(std::memory_order_acquire)) return;
  asked_.store(true, std::memory_order_release);
  wake_.ring_now();
}

void HangWatch::stop() {
  stopped_.store(true, std::memory_order_release);
  wake_.ring_now();
  if (thread_.joinable()) thread_.join();
}

void HangWatch::run() {
  // The record lives as long as this thread (here, not on the training thread: a file on a shared file system).
  write_rank_process_record(settings_);
  // With a watchdog, a look at least every second (or every timeout, if shorter): the iteration boundaries that
  // arm it do not wake this thread.
  const std::int64_t timeout_ms = settings_.timeout_ms;
  const std::int64_t longest_sleep_ms = timeout_ms > 0 ? std::min<std::int64_t>(timeout_ms, 1000) : INT32_MAX;
  std::int64_t watchdog_ms = longest_sleep_ms;
  while (!stopped_.load(std::memory_order_acquire)) {
    wake_.sleep(static_cast<int>(std::min(watchdog_ms, longest_sleep_ms)));
    if (stopped_.load(std::memory_order_acquire)) break;
    watchdog_ms = look();
  }
  remove_rank_process_record(settings_);
}

std::int64_t HangWatch::look() noexcept {
  if (asked_.exchange(false, std::memory_order_acq_rel)) write_hang_snapshot(settings_, spans_, "signal");
  const IterationProgress progress = iteration_progress();
  // Armed from the first boundary on; fires once per boundary that is not followed by another in time.
  if (settings_.timeout_ms <= 0 || progress.boundary_nanos == 0 || fired_for_ == progress.boundary_nanos)
    return INT32_MAX;
  const std::uint64_t timeout_nanos = static_cast<std::uint64_t>(settings_.timeout_ms) * 1000000;
  const std::uint64_t waited = steady_nanos() - progress.boundary_nanos;
  if (waited < timeout_nanos) return static_cast<std::int64_t>((timeout_nanos - waited) / 1000000) + 1;
  fired_for_ = progress.boundary_nanos;
  write_hang_snapshot(settings_, spans_, "watchdog");
  return INT32_MAX;
}

}  // namespace lens::internal
