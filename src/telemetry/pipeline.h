// The pipeline of one exporting process: a span drain, a log queue and a metric schedule, each owning its queue,
// counters and lock, driven by one background thread that exports what they hold to one exporter; beside them the
// hang watch (hang/hang_watch.h) on a thread of its own. Here live what concerns them at once: the thread and its
// wake-up, flush, shutdown by a deadline, SIGTERM and fork.
//
// Never freed once started (threads may still hold pointers into it), so a late span end or a hung exporter can
// never touch freed memory; a stopped pipeline only counts what still arrives.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/event_fd.h"
#include "device/cuda_runtime.h"
#include "hang/hang_watch.h"
#include "hang/snapshot.h"
#include "lens/config.h"
#include "lens/sampling.h"
#include "lens/telemetry.h"
#include "logs/log_queue.h"
#include "metrics/metric_schedule.h"
#include "resource/gpu_metrics.h"
#include "signals/exporter.h"
#include "trace/device_span_polling.h"
#include "trace/span_drain.h"

namespace lens::internal {

struct PipelineSettings {
  BatchConfig batch;      // spans (OTEL_BSP_*)
  BatchConfig log_batch;  // log records (OTEL_BLRP_*)
  Limits limits;
  Resource resource;
  bool metrics = false;  // push metrics every metric_interval_ms (not with Prometheus, which pulls)
  std::int64_t metric_interval_ms = 10000;
  std::int64_t metric_timeout_ms = 30000;  // OTEL_METRIC_EXPORT_TIMEOUT
  Temporality temporality = Temporality::kCumulative;
  int collective_group = -1;              // the catalogue's `communication` group: its spans carry lens.collective.seq
  StepTraces step_traces;                 // the step layout's step roots (trace/span_drain.h)
  HangSettings hang;                      // hang.path empty: no snapshots
  std::shared_ptr<const GpuMetrics> gpu;  // the rank's GPU, read at each metric collection; null: none
};

class Pipeline {
 public:
  Pipeline(PipelineSettings settings, std::unique_ptr<TelemetryExporter> exporter, std::unique_ptr<Sampler> sampler);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  SpanDrain& spans() noexcept { return spans_; }
  LogQueue& logs() noexcept { return logs_; }
  MetricSchedule& metrics() noexcept { return metrics_; }
  const Resource& resource() const noexcept { return settings_.resource; }
  const std::string& hang_path() const noexcept { return settings_.hang.path; }
  // Starts the hang watch (HangWatch::start: once the hang signal has its handler).
  void start_hang_watch() { hang_.start(); }
  // Device timing is on with `cuda` (DeviceSpanPolling::start). Throws ConfigError when the CUDA driver thread
  // cannot be started (then nothing changed).
  void poll_device(const CudaRuntime* cuda) { device_.start(cuda); }

  // Exports everything queued now; false when `deadline` passed first.
  bool force_flush(Deadline deadline);
  // Ends the calling thread's open spans (truncated), exports what is queued and stops the background
  // thread, by `deadline`. Idempotent. False when the deadline passed (a hung exporter: the thread is left).
  bool shutdown(Deadline deadline);
  // Stops a pipeline that never served the job (a setup that failed after building it): the background thread
  // exports nothing more and logs no summary, so the error is not held up by an endpoint that does not answer.
  void abandon();
  // SIGTERM: the same, with the open spans of `parked` (the thread in the signal handler) truncated by the
  // background thread. Async-signal-safe: only atomics and eventfds.
  void shutdown_from_signal(ThreadState* parked, int timeout_ms) noexcept;
  // SIGTERM handed on to an application that goes on: exports what is queued, waiting at most `timeout_ms`,
  // and keeps running. Async-signal-safe.
  void flush_from_signal(int timeout_ms) noexcept;
  // Asks the hang watch for a snapshot (P_HANG_SIGNAL's handler). Async-signal-safe.
  void request_hang_snapshot() noexcept;
  // In a forked child: the background thread did not come along; nothing may wait for it.
  void mark_stopped_in_child() noexcept;

  // The counts so far, across the three parts (a metric push that failed counts in export_failures); once the
  // thread has finished, what is still queued counts as dropped after shutdown.
  SpanStats stats() const;
  LogStats log_counts() const { return logs_.counts(finished()); }

 private:
  void run();
  void finish();
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }

  const PipelineSettings settings_;
  const std::unique_ptr<TelemetryExporter> exporter_;
  WakeUp wake_;  // producers, flush, shutdown and the SIGTERM handler wake the thread
  SpanDrain spans_;
  LogQueue logs_;
  MetricSchedule metrics_;
  HangWatch hang_;
  DeviceSpanPolling device_;

  std::mutex mutex_;  // guards stop_requested_, flush_requested_, flush_done_ (and done_'s waits)
  std::condition_variable done_;
  bool stop_requested_ = false;
  std::uint64_t flush_requested_ = 0;
  std::uint64_t flush_done_ = 0;
  std::atomic<bool> finished_{false};
  std::atomic<bool> shutdown_started_{false};
  std::atomic<bool> summary_logged_{false};
  std::atomic<bool> abandoned_{false};  // abandon(): stop without a last export

  // The SIGTERM handler's side: flags it sets, eventfds the thread answers on.
  EventFd done_fd_;     // the thread has finished
  EventFd flushed_fd_;  // the thread has exported what was queued
  std::atomic<bool> signal_flush_{false};
  std::atomic<bool> signal_shutdown_{false};
  std::atomic<ThreadState*> parked_{nullptr};

  std::mutex join_mutex_;  // guards joining or detaching thread_ (shutdown may run on two threads)
  std::thread thread_;
};

// The live pipeline whatever signals it carries (what SIGTERM flushes and fork stops).
extern std::atomic<Pipeline*> g_pipeline;

}  // namespace lens::internal
