// The log part of the pipeline: records from any thread, queued under a lock up to OTEL_BLRP_MAX_QUEUE_SIZE and
// exported in batches by the export thread (which the pipeline runs). Owns the queue and the log counters.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "common/event_fd.h"
#include "lens/config.h"
#include "lens/telemetry.h"
#include "signals/exporter.h"
#include "signals/log_record.h"

namespace lens::internal {

class LogQueue {
 public:
  // `resource`, `exporter` and `wake` belong to the pipeline, which outlives the queue's use of them.
  LogQueue(const BatchConfig& batch, const Resource& resource, TelemetryExporter& exporter, WakeUp& wake);
  LogQueue(const LogQueue&) = delete;
  LogQueue& operator=(const LogQueue&) = delete;

  // Any thread: queued, or dropped and counted (queue full, or stopped).
  void emit(LogRecordData record);
  // The export thread: takes everything queued and exports it in batches.
  void export_all(Deadline deadline);
  // The export thread, once a stop is asked for: later records are dropped.
  void stop() noexcept { stopped_.store(true, std::memory_order_release); }
  // The counts so far. Once the export thread has finished, what a racing thread queued after its last pass
  // will never be exported: `finished` counts it as dropped after shutdown.
  LogStats counts(bool finished) const;

 private:
  const std::size_t max_queue_size_;
  const std::size_t batch_size_;
  const Resource& resource_;
  TelemetryExporter& exporter_;
  WakeUp& wake_;
  std::atomic<bool> stopped_{false};

  mutable std::mutex mutex_;  // guards records_ and counts_
  std::vector<LogRecordData> records_;
  LogStats counts_;
};

// The queue log records go to now; null when logs are off (defined in logs/log.cc).
extern std::atomic<LogQueue*> g_log_queue;

}  // namespace lens::internal
