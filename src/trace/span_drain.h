// The span part of the pipeline: every recording thread's state and queue, drained in batches by the export
// thread (which the pipeline runs) and handed to the exporter. Owns the thread states, the queue budget, the
// span counters and the batch being built; knows nothing of logs, metrics or the thread that drives it.
//
// Never freed once made (threads may still hold pointers into it), so a late span end or a hung exporter can
// never touch freed memory; a stopped drain only counts what still arrives.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/event_fd.h"
#include "device/device_timing.h"
#include "lens/config.h"
#include "lens/sampling.h"
#include "lens/telemetry.h"
#include "sampling/build.h"
#include "signals/exporter.h"
#include "trace/scope_record.h"
#include "trace/thread_state.h"

namespace lens::internal {

// Which LENS_SPANs are light scopes (trace/scope_record.h), decided once for a drain from its settings; admits() is
// the one rule the span path asks. A light scope's group is every group but the communication one (its start adds the
// collective sequence) and the step layout's step group (its start derives a trace), and only where the sampler is
// decided inline (the default); never a device-timed group (its start records events: device timing may be turned on
// after setup, so that mask is read at each start). Its name fits a scope record, and the attribute limits would cut
// none of its packed attributes (the slot path cuts and counts what exceeds them).
struct LightScopePolicy {
  std::uint64_t groups;
  std::uint32_t max_attributes;
  std::uint32_t max_string_length;

  // collective_group, step_group: -1 for none.
  static LightScopePolicy of(bool sampler_decided_inline, int collective_group, int step_group,
                             const Limits& limits) noexcept;

  // Whether a LENS_SPAN of `group` with a literal name of `name_length` bytes and `attributes` packed at its call site
  // is a light scope (its group enabled: the caller's check).
  LENS_ALWAYS_INLINE bool admits(SpanGroup group, std::size_t name_length,
                                 const ScopeAttributes& attributes) const noexcept {
    const std::uint64_t light_groups = groups & ~g_device_group_bits.load(std::memory_order_relaxed);
    return (light_groups & group.bit()) != 0 && name_length <= kMaxScopeNameLength &&
           attributes.count <= max_attributes && attributes.longest_string <= max_string_length;
  }
};

// The step layout (TRACE_LAYOUT=step, CONTRACT §6), set where the layout is `step` and the catalogue has a `step`
// group: a step span (is_step_name) is in the trace it is given, else in step_trace_id(run id, n), n the rank's count
// of such spans so far (0, 1, ...; alike on every rank), with a Link to the span it would have been under. The sampler
// decides it by that id, as a root: a trace-id ratio keeps the same steps, whole, on every rank and in every
// OpenTelemetry SDK (CONTRACT §4). Its parent is the trace's root span, `lens.step` (step_root_span_id), which only the
// rank that `exports_roots` exports, with its own step's times: one root per step, no rank waiting.
struct StepTraces {
  int step_group = -1;  // -1: off
  std::string run_id;
  bool exports_roots = false;  // the lowest rank that exports (setup.cc)
  // A step span is a span of step_group given a trace id or named as the step span is in either SPAN_NAMES mode; the
  // group's other spans (today's Megatron-LM's iteration report, log, params norm, GC) stay in their parent's trace.
  static bool is_step_name(std::string_view name) noexcept {
    return name == "megatron.train_step" || name == "megatron.train.iteration";
  }
};

// What a drain is made with, fixed for its life (the recording threads read it without a lock).
struct SpanDrainSettings {
  BatchConfig batch;  // OTEL_BSP_*
  Limits limits;
  // Spans of this group (the catalogue's `communication`, -1: none) carry lens.collective.seq, the rank's count of
  // such spans started so far (1, 2, ...): their order, to join a trace with a flight-recorder dump of the same rank.
  int collective_group = -1;
  StepTraces step_traces;
};

class SpanDrain {
 public:
  // `resource`, `exporter` and `wake` belong to the pipeline, which outlives the drain's use of them.
  SpanDrain(const SpanDrainSettings& settings, std::unique_ptr<Sampler> sampler, const Resource& resource,
            TelemetryExporter& exporter, WakeUp& wake);
  SpanDrain(const SpanDrain&) = delete;
  SpanDrain& operator=(const SpanDrain&) = delete;

  // ---- recording threads ----
  // The calling thread's state, created and registered on its first span (null when stopped or out of memory).
  ThreadState* thread_state() noexcept;
  bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }
  // A queue just reached the batch size or dropped a span: the export thread comes, or is coming already (the
  // ring is a flag while it is busy).
  void wake_exporter() noexcept { wake_.ring(); }
  // The queues' memory went past half the budget: the export thread comes now, also out of a pause between drains.
  void wake_exporter_now() noexcept { wake_.ring_now(); }
  // A span ended after shutdown on a thread with no state here: counted as produced and dropped.
  void count_late_drop() noexcept { late_drops_.fetch_add(1, std::memory_order_relaxed); }
  // Ends `t`'s open spans, innermost first, as truncated (CONTRACT §6). Runs on t's thread, or on the export thread
  // while t is parked in the SIGTERM handler.
  void truncate_open_spans(ThreadState& t) noexcept;

 private:
  std::unique_ptr<Sampler> owned_sampler_;

 public:
  const Sampler* const sampler;
  const bool sampler_keeps_roots_and_follows_parents;  // decided inline (sampling/build.h)
  const Limits limits;
  const std::size_t batch_size;
  const int collective_group;
  std::atomic<std::int64_t> collective_sequence{0};

  const StepTraces step_traces;
  std::atomic<std::int64_t> steps_started{0};
  const LightScopePolicy light_scopes;

  // Queue memory beyond each thread's first chunk, for the whole process: room for OTEL_BSP_MAX_QUEUE_SIZE spans
  // of kQueueBytesPerSpan (a span with a few attributes takes 100-300 B, so a burst of many more fits), within
  // [kMinQueueBytes, kMaxQueueBytes].
  static constexpr std::size_t kQueueBytesPerSpan = 1024;
  static constexpr std::size_t kMinQueueBytes = 64 << 10;
  static constexpr std::size_t kMaxQueueBytes = std::size_t{1} << 30;
  const QueueBudget& queue_budget() const noexcept { return queue_budget_; }
  // Thread states alive now (a thread's is freed after it ends, once drained).
  std::size_t thread_states() const;

  // ---- the export thread ----
  // Exports what is queued now; true when at least one full batch went (producers are keeping up the pace).
  bool drain_and_export(Deadline deadline);
  // No more spans are accepted (set by the export thread once a stop is asked for).
  void stop() noexcept { stopped_.store(true, std::memory_order_release); }

  // ---- any thread ----
  // The counts so far; what is queued or being sent counts as `queued`.
  SpanStats stats() const;
  // A shutdown whose deadline passed: from now on nothing is exported or counted by the export thread; the batch
  // being sent, and every span still queued, are counted as failed (dropped_export_failed), once. Returns the
  // size of the batch being sent.
  std::uint64_t abandon_at_deadline() noexcept;

  // One open span as it was a moment ago: its thread and a copy of its record (header, then the arena up to what
  // was committed; a light scope's as its scope record), read with SpanView.
  struct OpenSpanCopy {
    pid_t tid;
    std::vector<std::uint8_t> record;
  };
  // Every thread's open spans now, by thread, outermost first (a hang snapshot). Lock-free for the recording
  // threads: a slot is read as a seqlock, and a span that ends meanwhile is left out.
  std::vector<OpenSpanCopy> open_spans() const;

 private:
  void export_batch(Deadline deadline);
  std::vector<ThreadState*> live_threads();
  // Appends t's open light scopes (a promoted one is its slot's) to a hang snapshot's list.
  static void add_open_light_scopes(const ThreadState& t, std::vector<OpenSpanCopy>& out);
  // Frees the state of a thread that has ended, once nothing refers to it; its counts are kept.
  void free_if_ended(ThreadState* t);
  void release_retired_chunks() noexcept;

  const Resource& resource_;
  TelemetryExporter& exporter_;
  WakeUp& wake_;

  QueueBudget queue_budget_;
  mutable std::mutex threads_mutex_;  // guards threads_ and ended_threads_
  std::vector<std::unique_ptr<ThreadState>> threads_;
  ThreadCounters ended_threads_;  // the counts of freed states

  alignas(64) std::atomic<bool> stopped_{false};  // read on every span start

  // Export-thread state, on cache lines of its own (the producers read stopped_ on every span: a batch vector
  // growing on its line cost them about 8 % per span): the batch points into queue chunks, freed once exported.
  alignas(64) TimeMap time_;
  std::vector<const std::uint8_t*> batch_spans_;
  std::vector<SpanChunk*> retired_chunks_;

  // The spans of the batch being exported. Whoever takes them counts them, exactly once, under count_mutex_ (once
  // a batch; never on a recording thread): the export thread when the exporter answers, or a shutdown whose
  // deadline passed first (as failed), which also sets abandoned_: no batch is sent or counted after it.
  bool abandoned() const;
  mutable std::mutex count_mutex_;
  bool abandoned_ = false;
  alignas(64) std::atomic<std::uint64_t> in_flight_{0};
  std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> dropped_export_failed_{0};
  std::atomic<std::uint64_t> rejected_by_collector_{0};
  std::atomic<std::uint64_t> export_failures_{0};
  std::atomic<std::uint64_t> late_drops_{0};
};

// The drain spans are recorded into now; null when none (disabled, non-exporting, traces off, after shutdown).
extern std::atomic<SpanDrain*> g_span_drain;

// Records a device span (device/device_timing.h) from the calling thread (the export thread) into `p`: a child of its
// host span named `name`, with `attributes`, queued and counted as any span.
void record_device_span(SpanDrain& p, const DeviceSpan& d, SpanName name,
                        std::span<const Attribute> attributes) noexcept;

}  // namespace lens::internal
