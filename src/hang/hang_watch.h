// The hang part of a rank's pipeline (beside the span drain, the log queue and the metric schedule): a thread of
// its own that writes the rank's hang snapshot (hang/snapshot.h) when asked (the hang signal's handler) or when the
// watchdog sees no iteration boundary for HangSettings::timeout_ms, and keeps the rank's process record while it
// runs. On a thread of its own so that a snapshot is written within moments of the signal or the stall, whatever
// the export thread is doing (behind a collector that hangs, it waited up to a minute).
//
//   HangWatch hang(settings, spans);
//   install_hang_signal(settings.signal);  // first: the process record the thread writes says "signal me"
//   hang.start();
//   hang.request_snapshot();               // from the signal's handler
//   hang.stop();                           // joins; the process record is removed
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "common/event_fd.h"
#include "hang/snapshot.h"
#include "trace/span_drain.h"

namespace lens::internal {

class HangWatch {
 public:
  // `settings` and `spans` outlive the watch. With settings.path empty it does nothing.
  HangWatch(const HangSettings& settings, const SpanDrain& spans) : settings_(settings), spans_(spans) {}
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;
  ~HangWatch() { stop(); }

  bool on() const noexcept { return !settings_.path.empty(); }
  // Starts the thread (once), which writes the rank's process record (`lens hang --signal` signals the processes
  // records name): call it once the hang signal has its handler, or the signal would end the process.
  void start();
  // Asks for a snapshot now. Async-signal-safe: an atomic and an eventfd.
  void request_snapshot() noexcept;
  // Ends the thread and waits for it. Idempotent.
  void stop();

 private:
  void run();
  // Writes a snapshot when one was asked for or the watchdog is due; returns how long the watchdog may sleep.
  std::int64_t look() noexcept;

  const HangSettings& settings_;
  const SpanDrain& spans_;
  std::atomic<bool> asked_{false};
  std::uint64_t fired_for_ = 0;  // the boundary (steady ns) the watchdog last wrote a snapshot after (watch thread)
  WakeUp wake_;                  // the hang signal's handler and stop() wake the thread
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace lens::internal
