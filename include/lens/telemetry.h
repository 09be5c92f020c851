// lens/telemetry.h: setting telemetry up and shutting it down.
//
// setup_telemetry() decides once per process, on every rank: it resolves the span-group spec (so a typo fails
// everywhere before training starts), finds rank, world size and local rank, asks the rank strategy whether this
// process exports, and builds the sampler. A disabled or non-exporting rank gets the empty group set and starts
// nothing: no thread, no file, no socket.
//
//   lens::Config config = lens::megatron::config_from_env();
//   lens::Telemetry telemetry = lens::setup_telemetry(config, {.rank = args.rank, .world_size = args.world_size});
//   ...
//   telemetry.shutdown(std::chrono::milliseconds(5000));
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "lens/config.h"
#include "lens/groups.h"
#include "lens/internal/visibility.h"
#include "lens/ranks.h"
#include "lens/sampling.h"

namespace lens {

// Attributes the consumer adds to the resource (CONTRACT §5, layer 2).
using ResourceValue = std::variant<std::string, bool, std::int64_t, double>;
using ResourceAttributes = std::vector<std::pair<std::string, ResourceValue>>;

inline constexpr std::chrono::milliseconds kDefaultShutdownTimeout{5000};

namespace internal {
struct TelemetryState;
struct TelemetryAccess;
struct ExportBatch;
}  // namespace internal

// What happened to the log records of a setup; after shutdown produced == exported + dropped().
struct LogStats {
  std::uint64_t produced = 0, exported = 0, dropped_queue_full = 0, dropped_after_shutdown = 0,
                dropped_export_failed = 0, rejected_by_collector = 0;
  std::uint64_t dropped() const noexcept {
    return dropped_queue_full + dropped_after_shutdown + dropped_export_failed + rejected_by_collector;
  }
};

// What happened to the spans of a setup. On an exporting rank, after shutdown:
// produced == exported + dropped(), exactly.
struct SpanStats {
  std::uint64_t produced = 0;                // sampled-in spans that ended, were truncated, or found no slot
  std::uint64_t exported = 0;                // accepted by the exporter
  std::uint64_t queued = 0;                  // waiting for the background thread, or in an export in progress
  std::uint64_t dropped_queue_full = 0;      // the thread's queue (OTEL_BSP_MAX_QUEUE_SIZE) was full
  std::uint64_t dropped_no_slot = 0;         // more than 64 spans open at once on one thread
  std::uint64_t dropped_after_shutdown = 0;  // ended after shutdown began
  std::uint64_t dropped_export_failed = 0;   // in a batch the exporter failed to deliver, or still being sent or
                                             // queued when shutdown's deadline passed
  std::uint64_t rejected_by_collector = 0;   // delivered, but refused by the collector (OTLP partial success)
  std::uint64_t export_failures = 0;         // failed export calls (batches)
  std::uint64_t sampled_out = 0;             // not recorded by the sampler's decision (not a drop)

  std::uint64_t dropped() const noexcept {
    return dropped_queue_full + dropped_no_slot + dropped_after_shutdown + dropped_export_failed +
           rejected_by_collector;
  }
};

// How this process takes part: what the launcher's environment does not say, or says otherwise.
//   lens::setup_telemetry(config, {.rank = rank, .world_size = world, .resource_attributes = {{"k", "v"}}});
struct SetupOptions {
  // Else from the launcher's environment (RANK/WORLD_SIZE/LOCAL_RANK, SLURM_*, OMPI_*, ...).
  std::optional<int> rank{};
  std::optional<int> world_size{};
  std::optional<int> local_rank{};
  // Added to the resource of an exporting rank.
  ResourceAttributes resource_attributes{};
  // Called only on an exporting rank, for resource attributes that cost something to find (NVML): a disabled
  // or non-exporting rank never runs it. Added after `resource_attributes` (later wins).
  std::function<ResourceAttributes()> resource_provider{};
  // A second setup while an enabled one is live throws ConfigError unless this is set, in which case the live
  // one is shut down first.
  bool reinit = false;
  // A consumer's own exporters in place of the configured one of their signal (lens's Python package feeds an
  // OpenTelemetry SDK SpanExporter / MetricReader through these): each batch as one OTLP/JSON request
  // (ExportTraceServiceRequest / ExportMetricsServiceRequest), on the pipeline's background thread, never the
  // caller's. Returning false or throwing counts one failed export; the next batch is handed over again.
  std::function<bool(const std::string& otlp_json)> span_sink{};
  std::function<bool(const std::string& otlp_json)> metric_sink{};
  // lens's Python package only (the type is internal and changes with lens): each batch of spans as lens's records,
  // read with lens/internal/span_batch.h, in place of span_sink's OTLP/JSON. Same rules as span_sink.
  std::function<bool(const internal::ExportBatch& batch)> span_batch_sink{};
};

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

// The handle of a setup. Copies share one setup; it ends at shutdown(), not when handles go away.
class LENS_API Telemetry {
 public:
  Telemetry() = default;  // an inert handle: not exporting

  // True on a rank that exports (enabled telemetry, chosen by the rank strategy).
  bool is_exporting() const noexcept;
  // Exports every span ended so far, within `timeout`. False when it could not finish in time.
  bool force_flush(std::chrono::milliseconds timeout = kDefaultShutdownTimeout);
  // Span and log record counts (all zero where nothing is exported).
  SpanStats span_stats() const;
  LogStats log_stats() const;
  // The run id every rank of the job shares (CONTRACT §5); empty where telemetry is off.
  const std::string& run_id() const;
  // Ends this setup within `timeout`: flushes what is queued and stops what was started. Idempotent, safe from
  // any thread. Returns false when something could not finish in time.
  bool shutdown(std::chrono::milliseconds timeout = kDefaultShutdownTimeout);

  const Config& config() const;
  RankInfo ranks() const;
  // The set the span-group spec resolved to (also on non-exporting ranks, where nothing is enabled).
  GroupSet resolved_span_groups() const;
  // The sampler of an exporting rank with traces on; nullptr elsewhere.
  const Sampler* sampler() const;

 private:
  friend struct internal::TelemetryAccess;
  explicit Telemetry(std::shared_ptr<internal::TelemetryState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::TelemetryState> state_;
};

// Sets telemetry up for this process. Rank and world size come from `options`, else from the launcher's
// environment. Throws ConfigError on any bad setting, on every rank alike.
LENS_API Telemetry setup_telemetry(const Config& config, SetupOptions options = {});

#else  // LENS_DISABLED: header-only no-ops.

class Telemetry {
 public:
  bool is_exporting() const noexcept { return false; }
  bool shutdown(std::chrono::milliseconds = kDefaultShutdownTimeout) { return true; }
  bool force_flush(std::chrono::milliseconds = kDefaultShutdownTimeout) { return true; }
  SpanStats span_stats() const { return {}; }
  LogStats log_stats() const { return {}; }
  const std::string& run_id() const { return run_id_; }
  const Config& config() const { return config_; }
  RankInfo ranks() const { return {}; }
  GroupSet resolved_span_groups() const { return {}; }
  const Sampler* sampler() const { return nullptr; }

 private:
  Config config_;
  std::string run_id_;
};

inline Telemetry setup_telemetry(const Config&, const SetupOptions& = {}) { return {}; }

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens
