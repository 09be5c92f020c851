// The metric part of the pipeline: when to push (every OTEL_METRIC_EXPORT_INTERVAL, on flush and at the end),
// what to collect (the instruments, then lens's own counts of its spans), and the cumulative view a Prometheus
// scrape reads. Metrics have no queue: instruments hold their values, and a push collects them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "lens/config.h"
#include "lens/telemetry.h"
#include "metrics/instruments.h"
#include "signals/exporter.h"

namespace lens::internal {

class MetricSchedule {
 public:
  // What lens counts of its own spans, read at each collection (lens.spans.*, lens.queue.fill).
  using SpanCounts = std::function<SpanStats()>;
  // More metrics read at each collection, from outside the instruments (the GPU's, resource/gpu_metrics.h): they
  // are appended to `out`, with `start_unix_nanos` as the start of any sum. Called from the collecting thread.
  using MoreMetrics = std::function<void(std::uint64_t start_unix_nanos, std::vector<MetricData>& out)>;

  // `push`: exported every `interval_ms` (not with Prometheus, which pulls). `resource` and `exporter` belong to
  // the pipeline, which outlives the schedule's use of them.
  MetricSchedule(bool push, std::int64_t interval_ms, Temporality temporality, const Resource& resource,
                 TelemetryExporter& exporter, SpanCounts span_counts, MoreMetrics more = {});
  MetricSchedule(const MetricSchedule&) = delete;
  MetricSchedule& operator=(const MetricSchedule&) = delete;

  // ---- the export thread ----
  // How long the thread may sleep before the next push is due, at most `limit_ms`.
  std::int64_t wait_ms(std::int64_t limit_ms) const;
  // Pushes when one is due or `now_anyway` (flush, stop), and schedules the next.
  void push_if_due(bool now_anyway, std::int64_t export_timeout_ms);

  // ---- any thread ----
  // The metrics as now, cumulative (for a Prometheus scrape).
  std::vector<MetricData> collect_for_pull();
  // Pushes that failed (counted with the span exports' in lens.export.failures).
  std::uint64_t export_failures() const noexcept { return export_failures_.load(std::memory_order_relaxed); }

 private:
  std::vector<MetricData> collect(MetricCollector& collector);

  const bool push_;
  const std::chrono::milliseconds interval_;
  const Resource& resource_;
  TelemetryExporter& exporter_;
  const SpanCounts span_counts_;
  const MoreMetrics more_;
  const std::uint64_t start_unix_nanos_;

  MetricCollector push_collector_;                            // the export thread's only
  std::chrono::steady_clock::time_point next_push_;           // the export thread's only
  std::mutex pull_mutex_;                                     // guards pull_collector_ (Prometheus scrapes may overlap)
  MetricCollector pull_collector_{Temporality::kCumulative};  // Prometheus scrapes: always cumulative
  std::atomic<std::uint64_t> export_failures_{0};
};

// lens's own metrics from its span counts: lens.spans.exported, lens.spans.dropped by reason,
// lens.export.failures, lens.queue.fill.
void append_span_metrics(const SpanStats& s, std::uint64_t start_unix_nanos, std::vector<MetricData>& out);

}  // namespace lens::internal
