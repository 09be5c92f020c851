#include "metrics/metric_schedule.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "device/device_timing.h"
#include "device/driver_thread.h"

namespace lens::internal {

MetricSchedule::MetricSchedule(bool push, std::int64_t interval_ms, Temporality temporality, const Resource& resource,
                               TelemetryExporter& exporter, SpanCounts span_counts, MoreMetrics more)
    : push_(push),
      interval_(interval_ms),
      resource_(resource),
      exporter_(exporter),
      span_counts_(std::move(span_counts)),
      more_(std::move(more)),
      start_unix_nanos_(unix_nanos_now()),
      push_collector_(temporality),
      next_push_(std::chrono::steady_clock::now() + interval_) {}

std::int64_t MetricSchedule::wait_ms(std::int64_t limit_ms) const {
  if (!push_) return limit_ms;
  auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_push_ - std::chrono::steady_clock::now());
  return std::clamp<std::int64_t>(until.count(), 0, limit_ms);
}

void MetricSchedule::push_if_due(bool now_anyway, std::int64_t export_timeout_ms) {
  if (!push_ || !(now_anyway || std::chrono::steady_clock::now() >= next_push_)) return;
  std::vector<MetricData> metrics = collect(push_collector_);
  ExportResult result = ExportResult::kFailure;
  try {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(export_timeout_ms);
    result = exporter_.export_metrics(MetricsBatch{resource_, metrics}, deadline);
  } catch (const std::exception& e) {
    log_warning("metric export threw: %s", e.what());
  }
  if (!result.delivered) export_failures_.fetch_add(1, std::memory_order_relaxed);
  next_push_ = std::chrono::steady_clock::now() + interval_;
}

std::vector<MetricData> MetricSchedule::collect_for_pull() {
  std::lock_guard lock(pull_mutex_);
  return collect(pull_collector_);
}

std::vector<MetricData> MetricSchedule::collect(MetricCollector& collector) {
  std::vector<MetricData> metrics = collector.collect();
  append_span_metrics(span_counts_(), start_unix_nanos_, metrics);
  if (more_) more_(start_unix_nanos_, metrics);
  return metrics;
}

namespace {

MetricPoint point(std::int64_t value, std::uint64_t start_unix_nanos, std::uint64_t now) {
  MetricPoint p = point_at(start_unix_nanos, now);
  p.int_value = value;
  return p;
}

}  // namespace

void append_span_metrics(const SpanStats& s, std::uint64_t start_unix_nanos, std::vector<MetricData>& out) {
  const std::uint64_t now = unix_nanos_now();
  auto counter = [&](const char* name, const char* unit, const char* description,
                     const std::vector<std::pair<const char*, std::uint64_t>>& by_reason, const char* key = "reason") {
    MetricData d{name, unit, description, InstrumentKind::kCounter, true, true, false, {}, {}};
    for (const auto& [reason, value] : by_reason) {
      MetricPoint p = point(static_cast<std::int64_t>(value), start_unix_nanos, now);
      if (reason) p.attributes = {{key, std::string(reason)}};
      d.points.push_back(std::move(p));
    }
    out.push_back(std::move(d));
  };
  counter("lens.spans.exported", "{span}", "Spans the exporter accepted.", {{nullptr, s.exported}});
  counter("lens.spans.dropped", "{span}", "Spans dropped, by reason.",
          {{"queue_full", s.dropped_queue_full},
           {"no_slot", s.dropped_no_slot},
           {"after_shutdown", s.dropped_after_shutdown},
           {"export_failed", s.dropped_export_failed},
           {"rejected", s.rejected_by_collector}});
  counter("lens.export.failures", "{call}", "Export calls that failed.", {{nullptr, s.export_failures}});
  MetricData fill{"lens.queue.fill",
                  "{span}",
                  "Spans waiting in the queues at collection.",
                  InstrumentKind::kGauge,
                  true,
                  false,
                  false,
                  {},
                  {}};
  fill.points.push_back(point(static_cast<std::int64_t>(s.queued), 0, now));  // a gauge has no start time
  out.push_back(std::move(fill));
  // Device timing's losses (docs/GPU.md), where it is on or has been.
  const DeviceCounts d = device_counts();
  if (device_timing_runtime() != nullptr || d.emitted + d.skipped_pool_exhausted + d.skipped_capturing +
                                                    d.skipped_error + d.dropped_incomplete + d.dropped_error !=
                                                0) {
    counter(
        "lens.device.skipped", "{span}", "Device-timed spans recorded with host time only, by reason.",
        {{"pool_exhausted", d.skipped_pool_exhausted}, {"capturing", d.skipped_capturing}, {"error", d.skipped_error}});
    counter("lens.device.dropped", "{span}", "Device spans recorded but never emitted, by reason.",
            {{"incomplete", d.dropped_incomplete}, {"error", d.dropped_error}});
  }
  // GPU driver calls that did not return within their bound (device/driver_thread.h), once there is one.
  const std::uint64_t nvml = stuck_driver_calls(DriverApi::kNvml), cuda = stuck_driver_calls(DriverApi::kCuda);
  if (nvml + cuda != 0) {
    counter("lens.driver.stuck_calls", "{call}", "GPU driver calls that did not return in time, by API.",
            {{"nvml", nvml}, {"cuda", cuda}}, "api");
  }
}

}  // namespace lens::internal
