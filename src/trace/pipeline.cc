#include "trace/pipeline.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cstdio>

#include "common/log.h"
#include "trace/clock.h"

namespace lens::internal {

std::atomic<Pipeline*> g_pipeline{nullptr};
std::atomic<Pipeline*> g_export_pipeline{nullptr};

namespace {

void signal_fd(int fd) noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

void clear_fd(int fd) noexcept {
  std::uint64_t value;
  [[maybe_unused]] ssize_t n = ::read(fd, &value, sizeof value);
}

// Waits until `fd` is readable or `timeout_ms` passed. Async-signal-safe.
bool wait_fd(int fd, int timeout_ms) noexcept {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

// Durations set in code are clamped as the environment's are checked (kMaxDurationMs), so no deadline overflows;
// a schedule delay of 0 becomes 1 ms, so an idle export thread sleeps instead of spinning.
PipelineSettings bounded(PipelineSettings s) {
  for (BatchConfig* b : {&s.batch, &s.log_batch}) {
    b->schedule_delay_ms = std::clamp<std::int64_t>(b->schedule_delay_ms, 1, kMaxDurationMs);
    b->export_timeout_ms = std::clamp<std::int64_t>(b->export_timeout_ms, 0, kMaxDurationMs);
  }
  s.metric_interval_ms = std::clamp<std::int64_t>(s.metric_interval_ms, 1, kMaxDurationMs);
  return s;
}

}  // namespace

Pipeline::Pipeline(PipelineSettings settings, std::unique_ptr<TelemetryExporter> exporter,
                   std::unique_ptr<Sampler> sampler_in)
    : owned_sampler_(std::move(sampler_in)),
      sampler(owned_sampler_.get()),
      limits(settings.limits),
      batch_size(static_cast<std::size_t>(settings.batch.max_export_batch_size)),
      settings_(bounded(std::move(settings))),
      exporter_(std::move(exporter)),
      queue_budget_(std::clamp<std::size_t>(static_cast<std::size_t>(settings_.batch.max_queue_size) * kQueueBytesPerSpan,
                                            kMinQueueBytes, kMaxQueueBytes)),
      metric_collector_(settings_.temporality),
      next_metrics_(std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.metric_interval_ms)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  done_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  flushed_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  batch_spans_.reserve(batch_size);
  // The background thread takes no signals: a SIGTERM handled there would wait for itself. Its mask is
  // inherited from this thread's at creation.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

ThreadState* Pipeline::thread_state() noexcept {
  if (stopped()) return nullptr;
  try {
    auto state = std::make_unique<ThreadState>(this, batch_size, queue_budget_);
    ThreadState* t = state.get();
    std::lock_guard lock(threads_mutex_);
    threads_.push_back(std::move(state));
    return t;
  } catch (...) {
    return nullptr;  // no memory: this thread records nothing
  }
}

void Pipeline::wake_exporter() noexcept {
  // An exchange, not a load first: the export thread clears the flag with an exchange before it drains, so
  // either it sees this producer's spans or this producer sees the flag cleared and writes the eventfd.
  if (!wake_pending_.exchange(true, std::memory_order_acq_rel)) signal_fd(wake_fd_);
}

std::size_t Pipeline::thread_states() const {
  std::lock_guard lock(threads_mutex_);
  return threads_.size();
}

std::vector<ThreadState*> Pipeline::snapshot_threads() {
  std::lock_guard lock(threads_mutex_);
  std::vector<ThreadState*> out;
  out.reserve(threads_.size());
  for (auto& t : threads_) out.push_back(t.get());
  return out;
}

void Pipeline::run() {
  const std::int64_t delay_ms = std::min(settings_.batch.schedule_delay_ms, settings_.log_batch.schedule_delay_ms);
  bool busy = false;
  for (;;) {
    // While producers keep queues filling, go straight on; otherwise sleep until woken, the delay passes or
    // metrics are due.
    std::int64_t wait_ms = delay_ms;
    if (settings_.metrics) {
      auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_metrics_ - std::chrono::steady_clock::now());
      wait_ms = std::clamp<std::int64_t>(until.count(), 0, wait_ms);
    }
    wait_fd(wake_fd_, busy ? 0 : static_cast<int>(std::min<std::int64_t>(wait_ms, INT32_MAX)));
    clear_fd(wake_fd_);
    wake_pending_.exchange(false, std::memory_order_acq_rel);  // pairs with wake_exporter()

    if (signal_shutdown_.load(std::memory_order_acquire)) {
      if (ThreadState* parked = parked_.exchange(nullptr)) truncate_open_spans(*parked);
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
    if (stop) stopped_.store(true, std::memory_order_release);
    auto export_deadline = std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(settings_.batch.export_timeout_ms);
    busy = drain_and_export(export_deadline);
    export_logs(export_deadline);
    if (settings_.metrics && (stop || flush_target != 0 || std::chrono::steady_clock::now() >= next_metrics_)) {
      export_metrics(std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.batch.export_timeout_ms));
      next_metrics_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.metric_interval_ms);
    }
    if (signal_flush) signal_fd(flushed_fd_);
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

bool Pipeline::drain_and_export(Deadline deadline) {
  bool full_batch = false;
  for (ThreadState* t : snapshot_threads()) {
    // Read before draining: an ended thread pushed its last span before it said so.
    const bool ended = t->exited.load(std::memory_order_acquire);
    // At most what is queued now, so a producer that never pauses cannot keep a flush from ending.
    std::uint64_t available = t->queue.size();
    while (available > 0) {
      std::size_t room = batch_size - batch_spans_.size();
      std::size_t n = t->queue.pop(
          std::min<std::uint64_t>(room, available), [&](const std::uint8_t* record) { batch_spans_.push_back(record); },
          [&](SpanChunk* chunk) { retired_chunks_.push_back(chunk); });
      if (n == 0) break;
      available -= n;
      if (batch_spans_.size() >= batch_size) {
        export_batch(deadline);
        full_batch = true;
      }
    }
    if (ended) free_if_ended(t);
  }
  if (!batch_spans_.empty() || !retired_chunks_.empty()) export_batch(deadline);
  return full_batch;
}

void Pipeline::free_if_ended(ThreadState* t) {
  // A span the thread started may still be open on another thread; its state waits for it.
  if (t->queue.size() != 0 || !t->all_slots_free()) return;
  std::unique_ptr<ThreadState> freed;
  {
    std::lock_guard lock(threads_mutex_);
    auto it = std::find_if(threads_.begin(), threads_.end(), [&](const auto& owned) { return owned.get() == t; });
    if (it == threads_.end()) return;
    ended_threads_.add(t->counters);
    // Its last records may sit in the batch being built: its chunks go when that batch has been exported.
    t->queue.retire_all([&](SpanChunk* chunk) { retired_chunks_.push_back(chunk); });
    freed = std::move(*it);
    *it = std::move(threads_.back());
    threads_.pop_back();
  }
}

void Pipeline::export_batch(Deadline deadline) {
  if (batch_spans_.empty()) {
    release_retired_chunks();
    return;
  }
  time_.refresh();
  in_flight_.store(batch_spans_.size(), std::memory_order_release);
  ExportResult result = ExportResult::kFailure;
  try {
    result = exporter_->export_spans(ExportBatch{settings_.resource, batch_spans_, time_}, deadline);
  } catch (const std::exception& e) {
    log_warning("span export threw: %s", e.what());
  }
  if (in_flight_.exchange(0, std::memory_order_acq_rel) == 0) {
    // A shutdown that gave up on this export has counted the batch as failed already.
  } else if (result.delivered) {
    const std::uint64_t rejected = std::min<std::uint64_t>(result.rejected, batch_spans_.size());
    exported_.fetch_add(batch_spans_.size() - rejected, std::memory_order_relaxed);
    rejected_by_collector_.fetch_add(rejected, std::memory_order_relaxed);
  } else {
    dropped_export_failed_.fetch_add(batch_spans_.size(), std::memory_order_relaxed);
    export_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  batch_spans_.clear();
  release_retired_chunks();
}

void Pipeline::release_retired_chunks() noexcept {
  for (SpanChunk* chunk : retired_chunks_) SpanChunk::free(chunk);
  retired_chunks_.clear();
}

void Pipeline::emit_log(LogRecordData record) {
  std::lock_guard lock(logs_mutex_);
  ++log_counts_.produced;
  if (stopped()) {
    ++log_counts_.dropped_after_shutdown;
    return;
  }
  if (logs_.size() >= static_cast<std::size_t>(settings_.log_batch.max_queue_size)) {
    ++log_counts_.dropped_queue_full;
    return;
  }
  logs_.push_back(std::move(record));
  if (logs_.size() == static_cast<std::size_t>(settings_.log_batch.max_export_batch_size)) wake_exporter();
}

void Pipeline::export_logs(Deadline deadline) {
  std::vector<LogRecordData> pending;
  {
    std::lock_guard lock(logs_mutex_);
    pending.swap(logs_);
  }
  const std::size_t batch = static_cast<std::size_t>(settings_.log_batch.max_export_batch_size);
  for (std::size_t at = 0; at < pending.size(); at += batch) {
    std::vector<LogRecordData> part(std::make_move_iterator(pending.begin() + static_cast<std::ptrdiff_t>(at)),
                                    std::make_move_iterator(pending.begin() + static_cast<std::ptrdiff_t>(
                                                                std::min(pending.size(), at + batch))));
    ExportResult result = ExportResult::kFailure;
    try {
      result = exporter_->export_logs(LogsBatch{settings_.resource, part}, deadline);
    } catch (const std::exception& e) {
      log_warning("log export threw: %s", e.what());
    }
    std::lock_guard lock(logs_mutex_);
    if (result.delivered) {
      const std::uint64_t rejected = std::min<std::uint64_t>(result.rejected, part.size());
      log_counts_.exported += part.size() - rejected;
      log_counts_.rejected_by_collector += rejected;
    } else {
      log_counts_.dropped_export_failed += part.size();
    }
  }
}

LogStats Pipeline::log_counts() const {
  std::lock_guard lock(logs_mutex_);
  LogStats c = log_counts_;
  if (finished_.load()) {  // what a racing thread queued after the last drain is never exported
    c.dropped_after_shutdown += logs_.size();
  }
  return c;
}

void Pipeline::append_self_metrics(std::vector<MetricData>& out) const {
  SpanStats s = stats();
  std::uint64_t now = unix_nanos_now();
  auto sum = [&](const char* name, const char* description, std::vector<std::pair<const char*, std::uint64_t>> by) {
    MetricData d{name, "{span}", description, InstrumentKind::kCounter, true, true, false, {}, {}};
    for (auto& [reason, value] : by) {
      MetricPoint p;
      if (reason) p.attributes = {{"reason", std::string(reason)}};
      p.int_value = static_cast<std::int64_t>(value);
      p.start_unix_nanos = start_unix_nanos_;
      p.time_unix_nanos = now;
      d.points.push_back(std::move(p));
    }
    out.push_back(std::move(d));
  };
  sum("lens.spans.exported", "Spans the exporter accepted.", {{nullptr, s.exported}});
  sum("lens.spans.dropped", "Spans dropped, by reason.",
      {{"queue_full", s.dropped_queue_full}, {"no_slot", s.dropped_no_slot},
       {"after_shutdown", s.dropped_after_shutdown}, {"export_failed", s.dropped_export_failed},
       {"rejected", s.rejected_by_collector}});
  MetricData failures{"lens.export.failures", "{call}", "Export calls that failed.", InstrumentKind::kCounter, true,
                      true, false, {}, {}};
  MetricPoint f;
  f.int_value = static_cast<std::int64_t>(s.export_failures);
  f.start_unix_nanos = start_unix_nanos_;
  f.time_unix_nanos = now;
  failures.points.push_back(std::move(f));
  out.push_back(std::move(failures));
  MetricData fill{"lens.queue.fill", "{span}", "Spans waiting in the queues at collection.", InstrumentKind::kGauge,
                  true, false, false, {}, {}};
  MetricPoint q;
  q.int_value = static_cast<std::int64_t>(s.queued);
  q.time_unix_nanos = now;
  fill.points.push_back(std::move(q));
  out.push_back(std::move(fill));
}

void Pipeline::export_metrics(Deadline deadline) {
  std::vector<MetricData> metrics = metric_collector_.collect();
  append_self_metrics(metrics);
  ExportResult result = ExportResult::kFailure;
  try {
    result = exporter_->export_metrics(MetricsBatch{settings_.resource, metrics}, deadline);
  } catch (const std::exception& e) {
    log_warning("metric export threw: %s", e.what());
  }
  if (!result.delivered) export_failures_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<MetricData> Pipeline::collect_for_pull() {
  std::lock_guard lock(pull_mutex_);
  std::vector<MetricData> metrics = pull_collector_.collect();
  append_self_metrics(metrics);
  return metrics;
}

void Pipeline::finish() {
  try {
    exporter_->shutdown();
  } catch (...) {
  }
  SpanStats s = stats();
  if (s.produced > 0 || s.dropped() > 0) {
    log_info("spans: %llu produced, %llu exported, %llu dropped (queue full %llu, no slot %llu, after shutdown %llu, "
             "export failed %llu, rejected by the collector %llu)",
             static_cast<unsigned long long>(s.produced), static_cast<unsigned long long>(s.exported),
             static_cast<unsigned long long>(s.dropped()), static_cast<unsigned long long>(s.dropped_queue_full),
             static_cast<unsigned long long>(s.dropped_no_slot),
             static_cast<unsigned long long>(s.dropped_after_shutdown),
             static_cast<unsigned long long>(s.dropped_export_failed),
             static_cast<unsigned long long>(s.rejected_by_collector));
  }
  {
    std::lock_guard lock(mutex_);
    finished_.store(true);
    flush_done_ = flush_requested_;
  }
  done_.notify_all();
  signal_fd(done_fd_);
}

bool Pipeline::force_flush(Deadline deadline) {
  std::unique_lock lock(mutex_);
  if (finished_) return true;
  std::uint64_t target = ++flush_requested_;
  signal_fd(wake_fd_);
  return done_.wait_until(lock, deadline, [&] { return flush_done_ >= target || finished_.load(); });
}

bool Pipeline::shutdown(Deadline deadline) {
  if (!shutdown_started_.exchange(true)) {
    ThreadState* mine = current_thread_state_if_any();
    if (mine != nullptr && mine->pipeline == this) truncate_open_spans(*mine);
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
    signal_fd(wake_fd_);
  }
  std::unique_lock lock(mutex_);
  if (!done_.wait_until(lock, deadline, [&] { return finished_.load(); })) {
    lock.unlock();
    std::uint64_t abandoned = in_flight_.exchange(0, std::memory_order_acq_rel);
    if (abandoned > 0) {
      dropped_export_failed_.fetch_add(abandoned, std::memory_order_relaxed);
      export_failures_.fetch_add(1, std::memory_order_relaxed);
    }
    log_warning("shutdown: the exporter did not finish by the deadline; the %llu spans it was sending are counted "
                "as failed, %llu still queued may be lost",
                static_cast<unsigned long long>(abandoned), static_cast<unsigned long long>(stats().queued));
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

void Pipeline::shutdown_from_signal(ThreadState* parked, int timeout_ms) noexcept {
  if (!shutdown_started_.exchange(true)) {
    if (parked != nullptr && parked->pipeline == this) parked_.store(parked, std::memory_order_release);
    signal_shutdown_.store(true, std::memory_order_release);
    signal_fd(wake_fd_);
  }
  wait_fd(done_fd_, timeout_ms);
}

void Pipeline::flush_from_signal(int timeout_ms) noexcept {
  if (finished_.load(std::memory_order_acquire)) return;
  clear_fd(flushed_fd_);
  signal_flush_.store(true, std::memory_order_release);
  signal_fd(wake_fd_);
  wait_fd(flushed_fd_, timeout_ms);
}

void Pipeline::truncate_open_spans(ThreadState& t) noexcept {
  std::uint64_t open = ~(t.free_slots | t.remote_free.load(std::memory_order_acquire));
  OpenSpan* spans[ThreadState::kMaxOpenSpans];
  int n = 0;
  for (int i = 0; i < ThreadState::kMaxOpenSpans; ++i)
    if (open & (std::uint64_t{1} << i)) spans[n++] = &t.slots[i];
  // Innermost first: the latest started ends first (SPEC §6).
  std::sort(spans, spans + n, [](OpenSpan* a, OpenSpan* b) { return a->header.start_tick > b->header.start_tick; });
  std::uint64_t now = now_ticks();
  for (int i = 0; i < n; ++i) {
    OpenSpan& s = *spans[i];
    s.header.end_tick = now;
    s.header.bits |= RecordHeader::kTruncated;  // the exporters add the attribute and the event
    ThreadCounters::bump(t.counters.produced);
    s.header.size = static_cast<std::uint32_t>((sizeof(RecordHeader) + s.header.arena_used + 7) & ~std::size_t{7});
    if (t.queue.push(s.header, s.arena) == SpanQueue::Push::kDropped)
      ThreadCounters::bump(t.counters.dropped_queue_full);
    s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    t.free_slots |= std::uint64_t{1} << s.owner_slot_index;
  }
}

SpanStats Pipeline::stats() const {
  SpanStats s;
  ThreadCounters total;
  {
    std::lock_guard lock(threads_mutex_);
    total.add(ended_threads_);
    for (const auto& t : threads_) {
      total.add(t->counters);
      s.queued += t->queue.size();
    }
  }
  s.produced = total.produced.load(std::memory_order_relaxed);
  s.dropped_queue_full = total.dropped_queue_full.load(std::memory_order_relaxed);
  s.dropped_no_slot = total.dropped_no_slot.load(std::memory_order_relaxed);
  s.dropped_after_shutdown = total.dropped_after_shutdown.load(std::memory_order_relaxed);
  s.sampled_out = total.sampled_out.load(std::memory_order_relaxed);
  std::uint64_t late = late_drops_.load(std::memory_order_relaxed);
  s.produced += late;
  s.dropped_after_shutdown += late;
  s.exported = exported_.load(std::memory_order_relaxed);
  s.dropped_export_failed = dropped_export_failed_.load(std::memory_order_relaxed);
  s.rejected_by_collector = rejected_by_collector_.load(std::memory_order_relaxed);
  s.export_failures = export_failures_.load(std::memory_order_relaxed);
  s.queued += in_flight_.load(std::memory_order_acquire);
  if (finished_.load(std::memory_order_acquire)) {
    // Whatever a racing thread queued after the last drain will never be exported.
    s.dropped_after_shutdown += s.queued;
    s.queued = 0;
  }
  return s;
}

}  // namespace lens::internal
