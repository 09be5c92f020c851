#include "logs/log_queue.h"

#include <algorithm>
#include <iterator>

#include "common/log.h"

namespace lens::internal {

LogQueue::LogQueue(const BatchConfig& batch, const Resource& resource, TelemetryExporter& exporter, WakeUp& wake)
    : max_queue_size_(static_cast<std::size_t>(batch.max_queue_size)),
      batch_size_(static_cast<std::size_t>(batch.max_export_batch_size)),
      resource_(resource),
      exporter_(exporter),
      wake_(wake) {}

void LogQueue::emit(LogRecordData record) {
  std::lock_guard lock(mutex_);
  ++counts_.produced;
  if (stopped_.load(std::memory_order_acquire)) {
    ++counts_.dropped_after_shutdown;
    return;
  }
  if (records_.size() >= max_queue_size_) {
    ++counts_.dropped_queue_full;
    return;
  }
  records_.push_back(std::move(record));
  if (records_.size() == batch_size_) wake_.ring();
}

void LogQueue::export_all(Deadline deadline) {
  std::vector<LogRecordData> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(records_);
  }
  for (std::size_t at = 0; at < pending.size(); at += batch_size_) {
    auto first = pending.begin() + static_cast<std::ptrdiff_t>(at);
    auto last = pending.begin() + static_cast<std::ptrdiff_t>(std::min(pending.size(), at + batch_size_));
    std::vector<LogRecordData> part(std::make_move_iterator(first), std::make_move_iterator(last));
    ExportResult result = ExportResult::kFailure;
    try {
      result = exporter_.export_logs(LogsBatch{resource_, part}, deadline);
    } catch (const std::exception& e) {
      log_warning("log export threw: %s", e.what());
    }
    std::lock_guard lock(mutex_);
    if (result.delivered) {
      const std::uint64_t rejected = std::min<std::uint64_t>(result.rejected, part.size());
      counts_.exported += part.size() - rejected;
      counts_.rejected_by_collector += rejected;
    } else {
      counts_.dropped_export_failed += part.size();
    }
  }
}

LogStats LogQueue::counts(bool finished) const {
  std::lock_guard lock(mutex_);
  LogStats c = counts_;
  if (finished) c.dropped_after_shutdown += records_.size();
  return c;
}

}  // namespace lens::internal
