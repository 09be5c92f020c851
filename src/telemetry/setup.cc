#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "common/process_identity.h"
#include "config/env.h"
#include "device/cuda_runtime.h"
#include "device/device_timing.h"
#include "export/exporter_factory.h"
#include "export/json_lines_exporter.h"
#include "export/prometheus.h"
#include "export/sink_exporter.h"
#include "groups/switch.h"
#include "lens/log.h"
#include "lens/telemetry.h"
#include "ranks/strategies.h"
#include "resource/gpu_metrics.h"
#include "resource/resource.h"
#include "sampling/build.h"
#include "telemetry/setup_internal.h"
#include "telemetry/state.h"
#include "watch/step_watch.h"

namespace lens {

namespace internal {

namespace {

// The live setup. Leaked on purpose (no work in static destructors; the atexit hook still reaches it), and
// replaced wholesale in a forked child, whose copy of the mutex may be held by a thread that does not exist.
struct Live {
  std::mutex mutex;  // guards state
  std::shared_ptr<TelemetryState> state;
};
std::atomic<Live*> g_live{new Live};

// Pipelines of past setups: never freed (a thread may still be inside a span of one), kept reachable.
std::vector<Pipeline*>& retired_pipelines() {
  static auto* v = new std::vector<Pipeline*>;
  return *v;
}

bool is_live_and_enabled(const std::shared_ptr<TelemetryState>& s) { return s && s->config.active() && !s->inert(); }

// Points spans, metrics and logs at `p` (null: nowhere); a rank that keeps only positions takes spans alone.
void route_signals(Pipeline* p, const Config& c, bool exporting) {
  const bool logs = p && exporting && c.logs_enabled;
  g_pipeline.store(p, std::memory_order_release);
  g_span_drain.store(p && c.traces_enabled ? &p->spans() : nullptr, std::memory_order_release);
  g_log_queue.store(logs ? &p->logs() : nullptr, std::memory_order_release);
  g_min_log_severity.store(logs ? static_cast<int>(c.min_log_severity) : kLogsOff, std::memory_order_relaxed);
  set_metrics_recording(p && exporting && c.metrics_enabled);
}

// Stops spans, metrics and logs going to `state`'s pipeline. Caller holds the live mutex.
void detach_locked(Live& l, const std::shared_ptr<TelemetryState>& state) {
  if (l.state != state) return;
  install_span_groups({}, {});
  stop_device_timing();
  route_signals(nullptr, state->config, false);
  l.state.reset();
}

// The groups timed on the device (docs/GPU.md): DEVICE_SPAN_GROUPS, else the loop's inner groups the catalogue has.
GroupSet device_span_groups(const Config& c) {
  if (!c.device_span_groups.empty()) return resolve(c.catalogue, c.device_span_groups, c.device_span_groups_source);
  GroupSet groups;
  for (std::string_view name : {"forward_backward", "microbatch", "layer", "communication"})
    if (SpanGroup g(0); c.catalogue.find_group(name, &g)) groups = groups | GroupSet{g};
  return groups;
}

// DEVICE_TIMING=cuda on a rank that exports spans: the runtime is loaded here, off the training thread; without one
// the rank keeps host time, with a warning, never an error.
void start_device_timing_for(const TelemetryState& s) {
  const Config& c = s.config;
  if (c.device_timing != DeviceTiming::kCuda || !c.traces_enabled || !s.exporting) return;
  std::string why;
  const CudaRuntime* cuda = cuda_runtime(&why);
  if (cuda == nullptr) {
    log_setup_warning("device timing (DEVICE_TIMING=cuda) is off on rank %d: %s; spans keep host time only",
                      s.ranks.rank, why.c_str());
    return;
  }
  try {
    s.pipeline->poll_device(cuda);
  } catch (const ConfigError& e) {  // no thread for CUDA's calls: the setup is live already, so host time only
    log_setup_warning("device timing (DEVICE_TIMING=cuda) is off on rank %d: %s; spans keep host time only",
                      s.ranks.rank, e.what());
    return;
  }
  start_device_timing(cuda, s.device_span_groups.bits(), nvtx());  // NVTX ranges too, where its library loads
}

void decide(TelemetryState& s, std::optional<int> rank, std::optional<int> world_size, std::optional<int> local_rank) {
  const Config& c = s.config;
  s.ranks = detect_rank_info(rank, world_size, local_rank);
  // Resolved on every rank, exporting or not, so a typo fails everywhere alike (CONTRACT §1).
  s.resolved_span_groups = resolve(c.catalogue, c.span_groups, c.span_groups_source);
  s.device_span_groups = device_span_groups(c);
  // An unknown strategy, or single_rank with a rank the job does not have, which would export nothing: refused on
  // every rank alike, exporting or not.
  const std::string strategy = registered_rank_strategy(c.rank_strategy, c.rank_strategy_source);
  if (!c.sampling_strategy.empty()) registered_sampling_strategy(c.sampling_strategy, c.sampling_strategy_source);
  if (strategy == "single_rank" && c.export_rank >= s.ranks.world_size) {
    throw ConfigError("lens: " + c.export_rank_source + "=" + std::to_string(c.export_rank) +
                      " is not a rank of this job (world size " + std::to_string(s.ranks.world_size) +
                      "), so no rank would export; valid: 0.." + std::to_string(s.ranks.world_size - 1) +
                      ", or a negative value for the last rank");
  }
  if (!(c.export_sample_rate >= 0.0 && c.export_sample_rate <= 1.0))  // NaN set in code: no rank would export
    throw ConfigError("lens: export_sample_rate must be in [0, 1], got " + std::to_string(c.export_sample_rate));
  RankStrategyInput input{s.ranks, c.export_rank, c.export_sample_rate};
  s.exporting = rank_exports(strategy, input, c.rank_strategy_source);
  // The step layout's roots come from the lowest exporting rank; only that layout asks the strategy of other ranks.
  s.exports_step_roots = s.exporting && c.trace_layout == TraceLayout::kStep &&
                         !a_lower_rank_exports(strategy, input, c.rank_strategy_source);
}

// One directory for every run, as Prometheus's file_sd globs only a file name: <FILE_DIR>/prometheus/*.json, one
// file for each serving process (run, rank, host and pid: a second job with the same run id and rank has a file of
// its own, and removes only its own). The directory is made readable by others where lens makes it; one that exists
// keeps its mode, and where a Prometheus of another user could not read the file, the warning says which directory.
void write_prometheus_target(TelemetryState& s) {
  const Config& c = s.config;
  const std::filesystem::path directory = std::filesystem::path(c.file_dir) / "prometheus";
  s.prometheus_target_path =
      (directory / (run_directory_name(s.run_id) + ".rank" + std::to_string(s.ranks.rank) + "." +
                    run_directory_name(this_host()) + "." + std::to_string(::getpid()) + ".json"))
          .string();
  const std::error_code error = make_readable_directories(directory);
  if (error || !write_file_atomically(
                   s.prometheus_target_path,
                   prometheus_target_json(c, s.prometheus->port(), s.run_id, s.ranks.rank, s.ranks.local_rank), 0644)) {
    log_setup_warning("cannot write %s: Prometheus's file service discovery will not find rank %d",
                      s.prometheus_target_path.c_str(), s.ranks.rank);
    s.prometheus_target_path.clear();
    return;
  }
  if (std::optional<std::filesystem::path> closed = first_closed_to_others(directory)) {
    log_setup_warning(
        "%s is closed to other users: a Prometheus running as another user finds no target of rank %d "
        "there; open it to them (chmod o+rx on the directory, o+x above it) or run Prometheus as this "
        "user (docs/METRICS_AND_LOGS.md)",
        closed->c_str(), s.ranks.rank);
  }
}

// The rank's Prometheus endpoint on OTEL_EXPORTER_PROMETHEUS_PORT + its local rank, and the file that tells
// Prometheus's file service discovery where it is. A port that cannot be bound is a warning, never the end of the
// job: the rank trains on, its metrics not served (each rank of a host asks for its own port, so only a port taken
// by another program can fail).
void serve_prometheus(TelemetryState& s) {
  const Config& c = s.config;
  const int port = prometheus_port_of(c, s.ranks.local_rank);
  try {
    if (port == 0)
      throw ConfigError("lens: OTEL_EXPORTER_PROMETHEUS_PORT=" + std::to_string(c.prometheus_port) + " + local rank " +
                        std::to_string(s.ranks.local_rank) + " is past 65535");
    s.prometheus = start_prometheus_endpoint(c, port, s.pipeline->resource(), s.pipeline->metrics());
  } catch (const ConfigError& e) {
    log_setup_warning("%s: rank %d's metrics are not served; the job goes on", e.what(), s.ranks.rank);
    return;
  }
  write_prometheus_target(s);
}

void stop_prometheus(TelemetryState& s) {
  if (!s.prometheus) return;
  s.prometheus->stop();
  if (!s.prometheus_target_path.empty()) remove_file(s.prometheus_target_path);  // the directory stays: it is shared
}

// The loop's structure, kept as positions with hang snapshots on whatever the enabled set (CONTRACT §10): where a
// rank is in its step, micro-batch and communication is what `lens hang` names, and production's `default` groups
// export none of them. The groups of these names that the catalogue has.
GroupSet hang_position_groups(const Catalogue& catalogue) {
  GroupSet positions;
  for (std::string_view name : {"step", "forward_backward", "microbatch", "communication"})
    if (SpanGroup g(0); catalogue.find_group(name, &g)) positions = positions | GroupSet{g};
  return positions;
}

// Where this rank's hang snapshot goes and what it says of the rank (none when snapshots are off).
HangSettings hang_settings(const TelemetryState& s) {
  const Config& c = s.config;
  HangSettings hang;
  if (!c.hang_snapshots()) return hang;
  hang.path = telemetry_file_prefix(c, s.run_id, s.ranks.rank) + ".snapshot.json";
  hang.process_path = telemetry_file_prefix(c, s.run_id, s.ranks.rank) + ".process.json";
  hang.signal = c.hang_signal;
  hang.rank = s.ranks.rank;
  hang.world_size = s.ranks.world_size;
  hang.run_id = s.run_id;
  hang.exporting = s.exporting;
  hang.timeout_ms = c.hang_timeout_ms;
  for (std::size_t i = 0; i < c.catalogue.group_count(); ++i)
    hang.group_names.emplace_back(c.catalogue.group_name(SpanGroup(static_cast<std::uint8_t>(i))));
  return hang;
}

PipelineSettings pipeline_settings(const TelemetryState& s) {
  const Config& c = s.config;
  PipelineSettings settings;
  settings.batch = c.span_batch;
  settings.log_batch = c.log_batch;
  settings.metric_timeout_ms = c.metric_export_timeout_ms;
  settings.limits = c.limits;
  settings.hang = hang_settings(s);
  if (SpanGroup communication(0); c.catalogue.find_group("communication", &communication))
    settings.collective_group = communication.id();
  if (SpanGroup step(0); c.trace_layout == TraceLayout::kStep && c.catalogue.find_group("step", &step))
    settings.step_traces = {step.id(), s.run_id, s.exports_step_roots};
  return settings;
}

// Every rank of an active setup keeps its step phases; the exporting one scores them (lens/straggler.h). A
// summary carries the run id's tag, so a rank that exports nothing resolves the id the same way.
StepWatchSettings step_watch_settings(const TelemetryState& s) {
  const Config& c = s.config;
  if (!c.active() || c.straggler_interval == 0) return {};
  return {.interval = c.straggler_interval,
          .run_id = s.run_id.empty() ? resolve_run_id(c, process_env()) : s.run_id,
          .rank = s.ranks.rank,
          .local_rank = s.ranks.local_rank,
          .host = this_host(),  // as the resource's host.name (detected)
          .exports = s.exporting && c.metrics_enabled};
}

// The exporting rank's pipeline: built before anything live changes, so an error leaves things as they were.
Pipeline* build_pipeline(TelemetryState& s, std::unique_ptr<TelemetryExporter> exporter) {
  const Config& c = s.config;
  std::unique_ptr<Sampler> sampler = build_sampler(c, s.ranks);
  const bool push_metrics = c.metrics_enabled && c.metrics_exporter != SignalExporter::kPrometheus;
  if (!exporter) {
    // A signal with a consumer's own exporter (a sink) needs no configured one: OTEL_*_EXPORTER is not opened.
    exporter = make_exporter(c, s.run_id, s.ranks.rank,
                             {c.traces_enabled && !s.span_sink, push_metrics && !s.metric_sink, c.logs_enabled});
  }
  if (s.span_sink || s.metric_sink)
    exporter = make_sink_exporter(std::move(exporter), c.traces_enabled ? s.span_sink : nullptr,
                                  push_metrics ? s.metric_sink : nullptr);
  init_clock();
  PipelineSettings settings = pipeline_settings(s);
  settings.resource = s.resource;
  settings.metrics = push_metrics;
  settings.metric_interval_ms = c.metric_export_interval_ms;
  settings.temporality = c.metrics_temporality;
  if (c.metrics_enabled) settings.gpu = GpuMetrics::for_rank(process_env(), s.ranks.local_rank);
  return new Pipeline(std::move(settings), std::move(exporter), std::move(sampler));
}

// A non-exporting rank's pipeline when hang snapshots are on: it enables nothing, so every span of it is a position
// (in its slot while open, never queued; where a thread is does not depend on sampling) and its background thread
// only watches and writes snapshots.
Pipeline* build_position_pipeline(const TelemetryState& s) {
  init_clock();
  PipelineSettings settings = pipeline_settings(s);
  return new Pipeline(std::move(settings), std::make_unique<DiscardExporter>(),
                      make_sdk_sampler(TracesSampler::kAlwaysOn, 1.0));
}

// What setup builds before it touches the live setup: which rank exports, its resource, pipeline and endpoints.
void build_state(TelemetryState& s, SetupOptions& options, std::unique_ptr<TelemetryExporter> exporter) {
  const Config& config = s.config;
  if (!config.active()) return;
  decide(s, options.rank, options.world_size, options.local_rank);
  if (s.exporting) {
    // Built only on exporting ranks (CONTRACT §3: no resource detection elsewhere).
    s.run_id = resolve_run_id(config, process_env());
    if (options.resource_provider)
      for (auto& kv : options.resource_provider()) s.resource_attributes.push_back(std::move(kv));
    s.resource = build_resource(config, s.ranks, s.run_id, s.resource_attributes, process_env());
    if (config.traces_enabled || config.metrics_enabled || config.logs_enabled)
      s.pipeline = build_pipeline(s, std::move(exporter));
    if (s.pipeline && config.metrics_enabled && config.metrics_exporter == SignalExporter::kPrometheus)
      serve_prometheus(s);
    if (config.control && s.ranks.rank == 0)  // throws when it cannot bind or write its file
      s.control = std::make_unique<ControlEndpoint>(
          config, (std::filesystem::path(config.file_dir) / run_directory_name(s.run_id)).string(), s.ranks.world_size);
  } else if (config.hang_snapshots() && config.traces_enabled) {
    // A hang does not care which ranks export: this one keeps where its threads are (CONTRACT §3).
    s.run_id = resolve_run_id(config, process_env());
    s.pipeline = build_position_pipeline(s);
  }
}

// A setup that failed after its pipeline started: the thread ends and the pipeline is kept reachable, as a retired
// one is (setup's error reaches the caller, and nothing of it keeps running).
void abandon_built_state(TelemetryState& s) {
  stop_prometheus(s);
  s.control.reset();
  if (s.pipeline == nullptr) return;
  s.pipeline->abandon();
  retired_pipelines().push_back(s.pipeline);
  s.pipeline = nullptr;
}

}  // namespace

struct TelemetryAccess {
  static Telemetry make(std::shared_ptr<TelemetryState> state) { return Telemetry(std::move(state)); }
};

bool TelemetryState::inert() const noexcept { return shut_down.load() || pid != ::getpid(); }

namespace {

// OTEL_<SIGNAL>_EXPORTER=none turns that signal off, as if <SIGNAL>_ENABLED=0.
Config with_signal_exporters_applied(Config c) {
  if (c.traces_exporter == SignalExporter::kNone) c.traces_enabled = false;
  if (c.metrics_exporter == SignalExporter::kNone) c.metrics_enabled = false;
  if (c.logs_exporter == SignalExporter::kNone) c.logs_enabled = false;
  return c;
}

}  // namespace

Telemetry setup(const Config& requested, SetupOptions options, std::unique_ptr<TelemetryExporter> exporter) {
  auto state = std::make_shared<TelemetryState>();
  state->config = with_signal_exporters_applied(requested);
  const Config& config = state->config;
  state->resource_attributes = std::move(options.resource_attributes);
  state->span_sink =
      options.span_batch_sink ? std::move(options.span_batch_sink) : span_json_sink(std::move(options.span_sink));
  state->metric_sink = std::move(options.metric_sink);
  state->pid = ::getpid();

  Live& l = *g_live.load();
  std::lock_guard lock(l.mutex);
  if (is_live_and_enabled(l.state) && !options.reinit) {
    throw ConfigError(
        "lens: telemetry is already set up in this process; shut the first setup down, or pass "
        "SetupOptions{.reinit = true} to replace it");
  }
  // Decide and build before touching the live setup, so a bad setting leaves it running as it was.
  try {
    build_state(*state, options, std::move(exporter));
  } catch (...) {
    abandon_built_state(*state);
    throw;
  }
  if (l.state) {
    std::shared_ptr<TelemetryState> previous = l.state;
    detach_locked(l, previous);
    previous->shut_down.store(true);
    stop_prometheus(*previous);
    previous->control.reset();
    if (previous->pipeline && !previous->pipeline->shutdown(std::chrono::steady_clock::now() + kDefaultShutdownTimeout))
      retired_pipelines().push_back(previous->pipeline);
  }

  if (state->pipeline) {
    retired_pipelines().push_back(state->pipeline);  // reachable for good, whatever happens to the handles
    route_signals(state->pipeline, config, state->exporting);
    const GroupSet positions =
        state->pipeline->hang_path().empty() ? GroupSet{} : hang_position_groups(config.catalogue);
    if (config.traces_enabled && state->exporting) {
      install_span_groups(config.catalogue.all(), state->resolved_span_groups, positions,
                          /*sampler_records=*/!drops_every_span(*state->pipeline->spans().sampler));
      start_device_timing_for(*state);
    } else if (config
                   .traces_enabled)  // a rank that exports nothing enables nothing (CONTRACT §3): it keeps where it is
      install_span_groups({}, {}, state->resolved_span_groups | positions);
    else
      install_span_groups({}, {}, positions);
  } else {
    install_span_groups({}, {});
  }
  if (state->pipeline) install_process_hooks();
  if (state->pipeline && !state->pipeline->hang_path().empty()) {
    // In this order: the process record the watch writes tells `lens hang --signal` to signal this process, and
    // without the handler the signal's default action would end it.
    install_hang_signal(config.hang_signal);
    try {
      state->pipeline->start_hang_watch();
    } catch (const ConfigError& e) {  // the live setup has changed already: the job goes on without snapshots
      log_setup_warning("%s: rank %d writes no hang snapshots; the job goes on", e.what(), state->ranks.rank);
    }
  }
  reset_control_state();
  reset_iteration_progress();
  configure_step_watch(step_watch_settings(*state));
  set_control_catalogue(config.catalogue);
  l.state = state;
  return TelemetryAccess::make(state);
}

bool shutdown_state(const std::shared_ptr<TelemetryState>& state, std::chrono::milliseconds timeout) {
  if (!state || state->pid != ::getpid() || state->shut_down.exchange(true)) return true;
  {
    Live& l = *g_live.load();
    std::lock_guard lock(l.mutex);
    detach_locked(l, state);
  }
  stop_prometheus(*state);
  state->control.reset();
  return state->pipeline ? state->pipeline->shutdown(std::chrono::steady_clock::now() + timeout) : true;
}

void shutdown_live_setup() noexcept {
  std::shared_ptr<TelemetryState> state;
  {
    Live& l = *g_live.load();
    std::lock_guard lock(l.mutex);
    state = l.state;
  }
  shutdown_state(state, kDefaultShutdownTimeout);
}

void forget_live_setup_after_fork() noexcept {
  // The child's copies of the live mutex and the pipeline's threads are not to be trusted: start afresh.
  g_span_drain.store(nullptr);
  g_log_queue.store(nullptr);
  if (Pipeline* p = g_pipeline.exchange(nullptr)) p->mark_stopped_in_child();
  g_min_log_severity.store(kLogsOff);
  set_metrics_recording(false);
  install_span_groups({}, {});
  // No memory in a child that was just forked: terminating it is the only answer left.
  g_live.store(new Live);  // NOLINT(bugprone-unhandled-exception-at-new)
}

}  // namespace internal

Telemetry setup_telemetry(const Config& config, SetupOptions options) {
  return internal::setup(config, std::move(options), nullptr);
}

bool Telemetry::is_exporting() const noexcept { return state_ && state_->exporting && !state_->inert(); }

bool Telemetry::shutdown(std::chrono::milliseconds timeout) { return internal::shutdown_state(state_, timeout); }

bool Telemetry::force_flush(std::chrono::milliseconds timeout) {
  if (!state_ || state_->inert() || !state_->pipeline) return true;
  return state_->pipeline->force_flush(std::chrono::steady_clock::now() + timeout);
}

SpanStats Telemetry::span_stats() const { return state_ && state_->pipeline ? state_->pipeline->stats() : SpanStats{}; }

LogStats Telemetry::log_stats() const {
  if (!state_ || !state_->pipeline) return {};
  return state_->pipeline->log_counts();
}

const std::string& Telemetry::run_id() const {
  static const auto* empty = new std::string;
  return state_ ? state_->run_id : *empty;
}

const Config& Telemetry::config() const {
  static const auto* inert = new Config;
  return state_ ? state_->config : *inert;
}

RankInfo Telemetry::ranks() const { return state_ ? state_->ranks : RankInfo{}; }

GroupSet Telemetry::resolved_span_groups() const { return state_ ? state_->resolved_span_groups : GroupSet{}; }

const Sampler* Telemetry::sampler() const {
  return state_ && state_->exporting && state_->pipeline && state_->config.traces_enabled
             ? state_->pipeline->spans().sampler
             : nullptr;
}

}  // namespace lens
