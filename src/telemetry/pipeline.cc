#include "telemetry/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "common/log.h"
#include "common/signal_free_thread.h"

namespace lens::internal {

std::atomic<Pipeline*> g_pipeline{nullptr};

namespace {

// How long the export thread pauses between drains while full batches keep coming. Each pause costs a wake-up
// (about 30 us of CPU on a VM); a producer at full speed (10 M spans/s) queues about 10,000 spans meanwhile, and
// should the queues' memory pass half the budget first, the pause is cut short (SpanDrain::wake_exporter_now).
constexpr long kBusyPauseMicros = 1000;

// Durations set in code are clamped as the environment's are checked (kMaxDurationMs), so no deadline overflows;
// a schedule delay of 0 becomes 1 ms, so an idle export thread sleeps instead of spinning.
PipelineSettings bounded(PipelineSettings s) {
  for (BatchConfig* b : {&s.batch, &s.log_batch}) {
    b->schedule_delay_ms = std::clamp<std::int64_t>(b->schedule_delay_ms, 1, kMaxDurationMs);
    b->export_timeout_ms = std::clamp<std::int64_t>(b->export_timeout_ms, 0, kMaxDurationMs);
  }
  s.metric_interval_ms = std::clamp<std::int64_t>(s.metric_interval_ms, 1, kMaxDurationMs);
  s.metric_timeout_ms = std::clamp<std::int64_t>(s.metric_timeout_ms, 0, kMaxDurationMs);
  return s;
}

Deadline deadline_in(std::int64_t ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }

void log_span_summary(const SpanStats& s) {
  if (s.produced == 0 && s.dropped() == 0) return;
  auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  log_info(
      "spans: %llu produced, %llu exported, %llu dropped (queue full %llu, no slot %llu, after shutdown %llu, "
      "export failed %llu, rejected by the collector %llu)",
      n(s.produced), n(s.exported), n(s.dropped()), n(s.dropped_queue_full), n(s.dropped_no_slot),
      n(s.dropped_after_shutdown), n(s.dropped_export_failed), n(s.rejected_by_collector));
}

}  // namespace

Pipeline::Pipeline(PipelineSettings settings, std::unique_ptr<TelemetryExporter> exporter,
                   std::unique_ptr<Sampler> sampler)
    : settings_(bounded(std::move(settings))),
      exporter_(std::move(exporter)),
      spans_({.batch = settings_.batch,
              .limits = settings_.limits,
              .collective_group = settings_.collective_group,
              .step_traces = settings_.step_traces},
             std::move(sampler), settings_.resource, *exporter_, wake_),
      logs_(settings_.log_batch, settings_.resource, *exporter_, wake_),
      metrics_(
          settings_.metrics, settings_.metric_interval_ms, settings_.temporality, settings_.resource, *exporter_,
          [this] { return stats(); },
          [gpu = settings_.gpu](std::uint64_t start, std::vector<MetricData>& out) {
            if (gpu) gpu->append(start, out);
          }),
      hang_(settings_.hang, spans_),
      device_(spans_, settings_.batch.export_timeout_ms) {
  thread_ = start_signal_free_thread("the export thread", "lens-export",
                                     [this] { run(); });  // a SIGTERM handled there would wait for itself
}

void Pipeline::run() {
  const std::int64_t delay_ms = std::min(settings_.batch.schedule_delay_ms, settings_.log_batch.schedule_delay_ms);
  bool busy = false;
  for (;;) {
    // While producers keep queues filling, pause briefly and drain again (their rings cost them nothing meanwhile);
    // otherwise sleep until woken, the delay passes or metrics are due.
    const std::int64_t idle_ms = device_.wait_ms(std::min(metrics_.wait_ms(delay_ms), std::int64_t{INT32_MAX}));
    if (busy)
      wake_.pause(kBusyPauseMicros);
    else
      wake_.sleep(static_cast<int>(idle_ms));

    if (signal_shutdown_.load(std::memory_order_acquire)) {
      if (ThreadState* parked = parked_.exchange(nullptr)) spans_.truncate_open_spans(*parked);
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
    }
    const bool signal_flush = signal_flush_.exchange(false, std::memory_order_acq_rel);
    std::uint64_t flush_target;
    bool stop;
    {
      std::lock_guard lock(mutex_);
      flush_target = flush_requested_;
      stop = stop_requested_;
    }
    if (stop && abandoned_.load(std::memory_order_acquire)) {  // nothing of the job's to send, nothing to say
      summary_logged_.store(true);
      finish();
      return;
    }
    device_.poll(stop);  // before the drain stops: what completes by then is still exported
    if (stop) {
      spans_.stop();
      logs_.stop();
    }
    // Each signal by its own timeout: OTEL_BSP_EXPORT_TIMEOUT, OTEL_BLRP_EXPORT_TIMEOUT, OTEL_METRIC_EXPORT_TIMEOUT
    // (the logs and metrics took the spans' before).
    busy = spans_.drain_and_export(deadline_in(settings_.batch.export_timeout_ms));
    logs_.export_all(deadline_in(settings_.log_batch.export_timeout_ms));
    metrics_.push_if_due(stop || flush_target != 0, settings_.metric_timeout_ms);
    if (signal_flush) flushed_fd_.signal();
    if (stop) {
      finish();
      return;
    }
    if (flush_target != 0) {
      std::lock_guard lock(mutex_);
      flush_done_ = std::max(flush_done_, flush_target);
      done_.notify_all();
    }
  }
}

void Pipeline::finish() {
  hang_.stop();
  try {
    exporter_->shutdown();
  } catch (...) {
  }
  if (!summary_logged_.exchange(true)) log_span_summary(stats());
  {
    std::lock_guard lock(mutex_);
    finished_.store(true);
    flush_done_ = flush_requested_;
  }
  done_.notify_all();
  done_fd_.signal();
}

bool Pipeline::force_flush(Deadline deadline) {
  std::unique_lock lock(mutex_);
  if (finished()) return true;
  std::uint64_t target = ++flush_requested_;
  wake_.ring_now();
  return done_.wait_until(lock, deadline, [&] { return flush_done_ >= target || finished(); });
}

bool Pipeline::shutdown(Deadline deadline) {
  if (!shutdown_started_.exchange(true)) {
    ThreadState* mine = current_thread_state_if_any();
    if (mine != nullptr && mine->drain == &spans_) spans_.truncate_open_spans(*mine);
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
    wake_.ring_now();
  }
  std::unique_lock lock(mutex_);
  if (!done_.wait_until(lock, deadline, [&] { return finished(); })) {
    lock.unlock();
    const std::uint64_t failed_before = spans_.stats().dropped_export_failed;
    const std::uint64_t sending = spans_.abandon_at_deadline();
    const std::uint64_t failed_after = spans_.stats().dropped_export_failed;
    const std::uint64_t queued = failed_after > failed_before + sending ? failed_after - failed_before - sending : 0;
    log_warning(
        "shutdown: the exporter did not finish by the deadline; the %llu spans it was sending and the %llu still "
        "queued are counted as failed (dropped_export_failed)",
        static_cast<unsigned long long>(sending), static_cast<unsigned long long>(queued));
    if (!summary_logged_.exchange(true)) log_span_summary(stats());  // the totals, final now
    // Left to finish on its own: the pipeline is never freed, so it touches nothing that goes away.
    std::lock_guard join_lock(join_mutex_);
    if (thread_.joinable()) thread_.detach();
    return false;
  }
  lock.unlock();
  std::lock_guard join_lock(join_mutex_);  // shutdown may be called from two threads at once
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  return true;
}

void Pipeline::abandon() {
  abandoned_.store(true, std::memory_order_release);
  shutdown(std::chrono::steady_clock::now() + kDefaultShutdownTimeout);  // the thread now ends at once
}

void Pipeline::shutdown_from_signal(ThreadState* parked, int timeout_ms) noexcept {
  if (!shutdown_started_.exchange(true)) {
    if (parked != nullptr && parked->drain == &spans_) parked_.store(parked, std::memory_order_release);
    signal_shutdown_.store(true, std::memory_order_release);
    wake_.ring_now();
  }
  done_fd_.wait(timeout_ms);
}

void Pipeline::flush_from_signal(int timeout_ms) noexcept {
  if (finished()) return;
  flushed_fd_.clear();
  signal_flush_.store(true, std::memory_order_release);
  wake_.ring_now();
  flushed_fd_.wait(timeout_ms);
}

void Pipeline::request_hang_snapshot() noexcept {
  if (!finished()) hang_.request_snapshot();
}

void Pipeline::mark_stopped_in_child() noexcept {
  spans_.stop();
  logs_.stop();
  finished_.store(true);
}

SpanStats Pipeline::stats() const {
  SpanStats s = spans_.stats();
  s.export_failures += metrics_.export_failures();
  if (finished()) {
    // Whatever a racing thread queued after the last drain will never be exported.
    s.dropped_after_shutdown += s.queued;
    s.queued = 0;
  }
  return s;
}

}  // namespace lens::internal
