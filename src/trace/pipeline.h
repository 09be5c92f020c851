// The trace pipeline of one exporting process: per-thread queues of ended spans, drained, batched and exported
// by one background thread. Never freed once started (threads may still hold pointers into it), so a late span
// end or a hung exporter can never touch freed memory; a retired pipeline only counts what still arrives.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "export/exporter.h"
#include "logs/log_record.h"
#include "metrics/instruments.h"
#include "lens/config.h"
#include "lens/sampling.h"
#include "lens/telemetry.h"
#include "trace/thread_state.h"

namespace lens::internal {

struct PipelineSettings {
  BatchConfig batch;       // spans (OTEL_BSP_*)
  BatchConfig log_batch;   // log records (OTEL_BLRP_*)
  Limits limits;
  Resource resource;
  bool metrics = false;             // push metrics every metric_interval_ms (not with Prometheus, which pulls)
  std::int64_t metric_interval_ms = 10000;
  Temporality temporality = Temporality::kCumulative;
};


class Pipeline {
 public:
  Pipeline(PipelineSettings settings, std::unique_ptr<TelemetryExporter> exporter, std::unique_ptr<Sampler> sampler);
  Pipeline(const Pipeline&) = delete;

  // The calling thread's state, created and registered on its first span (null when there is no memory).
  ThreadState* thread_state() noexcept;
  // Queue memory beyond each thread's first chunk, for the whole process: room for OTEL_BSP_MAX_QUEUE_SIZE spans
  // of kQueueBytesPerSpan (a span with a few attributes takes 100-300 B, so a burst of many more fits), within
  // [kMinQueueBytes, kMaxQueueBytes].
  static constexpr std::size_t kQueueBytesPerSpan = 1024;
  static constexpr std::size_t kMinQueueBytes = 64 << 10;
  static constexpr std::size_t kMaxQueueBytes = std::size_t{1} << 30;
  const QueueBudget& queue_budget() const noexcept { return queue_budget_; }
  // Thread states alive now (a thread's is freed after it ends, once drained).
  std::size_t thread_states() const;

  // Exports everything queued now; false when `deadline` passed first.
  bool force_flush(Deadline deadline);
  // Ends the calling thread's open spans (truncated), exports what is queued and stops the background
  // thread, by `deadline`. Idempotent. False when the deadline passed (a hung exporter: the thread is left).
  bool shutdown(Deadline deadline);
  // SIGTERM: the same, with the open spans of `parked` (the thread in the signal handler) truncated by the
  // background thread. Async-signal-safe: only atomics and a pipe.
  void shutdown_from_signal(ThreadState* parked, int timeout_ms) noexcept;
  // SIGTERM handed on to an application that goes on: exports what is queued, waiting at most `timeout_ms`,
  // and keeps running. Async-signal-safe.
  void flush_from_signal(int timeout_ms) noexcept;

  SpanStats stats() const;
  LogStats log_counts() const;

  // A log record from any thread: queued (bounded by OTEL_BLRP_MAX_QUEUE_SIZE) or dropped and counted.
  void emit_log(LogRecordData record);
  // The metrics as now, cumulative (for a Prometheus scrape): the instruments and lens's own.
  std::vector<MetricData> collect_for_pull();
  const Resource& resource() const noexcept { return settings_.resource; }
  bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

  // Producer side: a queue just reached the batch size.
  void wake_exporter() noexcept;
  // A span ended after shutdown on a thread with no state here: counted as produced and dropped.
  void count_late_drop() noexcept { late_drops_.fetch_add(1, std::memory_order_relaxed); }
  // Ends `t`'s open spans, innermost first, as truncated (SPEC §6). Runs on t's thread, or on the background
  // thread while t is parked in the SIGTERM handler.
  void truncate_open_spans(ThreadState& t) noexcept;

  // In a forked child: the background thread did not come along; nothing may wait for it.
  void mark_stopped_in_child() noexcept {
    stopped_.store(true);
    finished_.store(true);
  }

 private:
  std::unique_ptr<Sampler> owned_sampler_;

 public:
  const Sampler* const sampler;
  const Limits limits;
  const std::size_t batch_size;

 private:
  void run();
  // Exports what is queued now; true when at least one full batch went (producers are keeping up the pace).
  bool drain_and_export(Deadline deadline);
  void export_metrics(Deadline deadline);
  void export_logs(Deadline deadline);
  void append_self_metrics(std::vector<MetricData>& out) const;
  void export_batch(Deadline deadline);
  std::vector<ThreadState*> snapshot_threads();
  // Frees the state of a thread that has ended, once nothing refers to it; its counts are kept.
  void free_if_ended(ThreadState* t);
  void release_retired_chunks() noexcept;
  void finish();

  PipelineSettings settings_;
  std::unique_ptr<TelemetryExporter> exporter_;

  QueueBudget queue_budget_;
  mutable std::mutex threads_mutex_;  // guards threads_ and ended_threads_
  std::vector<std::unique_ptr<ThreadState>> threads_;
  ThreadCounters ended_threads_;  // the counts of freed states

  std::mutex mutex_;  // guards stop_requested_, flush_requested_, flush_done_ (and done_'s waits)
  std::condition_variable done_;
  bool stop_requested_ = false;
  std::atomic<bool> finished_{false};
  std::uint64_t flush_requested_ = 0;
  std::uint64_t flush_done_ = 0;
  alignas(64) std::atomic<bool> wake_pending_{false};
  alignas(64) std::atomic<bool> stopped_{false};  // no more spans are accepted; read on every span end
  std::atomic<bool> shutdown_started_{false};
  // The spans of the batch being exported. Whoever takes them with exchange(0) counts them, exactly once: the
  // export thread when the exporter answers, or a shutdown whose deadline passed first (as failed).
  std::atomic<std::uint64_t> in_flight_{0};
  int wake_fd_ = -1;  // eventfd: producers, flush, shutdown and the SIGTERM handler wake the thread
  int done_fd_ = -1;  // eventfd: the thread tells the SIGTERM handler it has finished
  int flushed_fd_ = -1;  // eventfd: the thread tells the SIGTERM handler it has exported what was queued
  std::atomic<bool> signal_flush_{false};
  std::atomic<bool> signal_shutdown_{false};
  std::atomic<ThreadState*> parked_{nullptr};

  // Export-thread state: the batch points into queue chunks, freed once it is exported.
  TimeMap time_;
  std::vector<const std::uint8_t*> batch_spans_;
  std::vector<SpanChunk*> retired_chunks_;

  alignas(64) std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> dropped_export_failed_{0};
  std::atomic<std::uint64_t> rejected_by_collector_{0};
  std::atomic<std::uint64_t> export_failures_{0};
  std::atomic<std::uint64_t> late_drops_{0};

  std::mutex join_mutex_;  // guards joining or detaching thread_ (shutdown may run on two threads)
  MetricCollector metric_collector_;
  std::mutex pull_mutex_;  // guards pull_collector_ (Prometheus scrapes may overlap)
  MetricCollector pull_collector_{Temporality::kCumulative};  // Prometheus scrapes: always cumulative
  const std::uint64_t start_unix_nanos_ = unix_nanos_now();
  std::chrono::steady_clock::time_point next_metrics_;

  mutable std::mutex logs_mutex_;  // guards logs_ and log_counts_
  std::vector<LogRecordData> logs_;
  LogStats log_counts_;  // guarded by logs_mutex_ (exported/dropped_export_failed: export thread, same lock)

  std::thread thread_;
};

// The pipeline spans are recorded into now; null when none (disabled, non-exporting, traces off, after
// shutdown).
extern std::atomic<Pipeline*> g_pipeline;
// The live pipeline whatever signals it carries (what SIGTERM flushes).
extern std::atomic<Pipeline*> g_export_pipeline;
// The pipeline log records go to; null when logs are off (defined in logs/log.cc).
extern std::atomic<Pipeline*> g_logs_pipeline;

}  // namespace lens::internal
