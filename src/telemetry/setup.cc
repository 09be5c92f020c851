#include <mutex>

#include "groups/switch.h"
#include "lens/telemetry.h"
#include "sampling/build.h"
#include "telemetry/state.h"

namespace lens {

namespace {

// The live setup. Leaked on purpose: no work may happen in static destructors, and atexit handlers of later
// layers still reach it.
struct Live {
  std::mutex mutex;
  std::shared_ptr<internal::TelemetryState> state;
};
Live& live() {
  static auto* l = new Live;
  return *l;
}

bool is_live_and_enabled(const std::shared_ptr<internal::TelemetryState>& s) {
  return s && s->config.active() && !s->shut_down.load();
}

// Ends `state` if it is still live. Caller holds live().mutex.
void end_locked(Live& l, const std::shared_ptr<internal::TelemetryState>& state) {
  if (l.state == state) {
    internal::install_span_groups({}, {});
    l.state.reset();
  }
}

void decide(internal::TelemetryState& s, std::optional<int> rank, std::optional<int> world_size,
            std::optional<int> local_rank) {
  const Config& c = s.config;
  s.ranks = detect_rank_info(rank, world_size, local_rank);
  // Resolved on every rank, exporting or not, so a typo fails everywhere alike (SPEC §1).
  s.resolved_span_groups = resolve(c.catalogue, c.span_groups, c.span_groups_source);
  RankStrategyInput input{s.ranks, c.export_rank, c.export_sample_rate};
  s.exporting = rank_exports(c.rank_strategy, input, c.rank_strategy_source);
  if (s.exporting && c.traces_enabled) s.sampler = internal::build_sampler(c, s.ranks);
}

}  // namespace

Telemetry setup_telemetry(const Config& config, std::optional<int> rank, std::optional<int> world_size,
                          ResourceAttributes resource_attributes, SetupOptions options) {
  auto state = std::make_shared<internal::TelemetryState>();
  state->config = config;
  state->resource_attributes = std::move(resource_attributes);

  Live& l = live();
  std::lock_guard lock(l.mutex);
  if (is_live_and_enabled(l.state) && !options.reinit) {
    throw ConfigError(
        "lens: telemetry is already set up in this process; shut the first setup down, or pass "
        "SetupOptions{.reinit = true} to replace it");
  }
  // Decide before touching the live setup, so a bad setting leaves it running as it was.
  if (config.active()) decide(*state, rank, world_size, options.local_rank);
  if (l.state) {
    l.state->shut_down.store(true);
    end_locked(l, l.state);
  }

  bool spans_on = state->exporting && config.traces_enabled;
  internal::install_span_groups(spans_on ? config.catalogue.all() : GroupSet{},
                                spans_on ? state->resolved_span_groups : GroupSet{});
  l.state = state;
  return Telemetry(state);
}

bool Telemetry::is_exporting() const noexcept { return state_ && state_->exporting && !state_->shut_down.load(); }

bool Telemetry::shutdown(std::chrono::milliseconds /*timeout: bounds the pipeline's flush, later layers*/) {
  if (!state_ || state_->shut_down.exchange(true)) return true;
  Live& l = live();
  std::lock_guard lock(l.mutex);
  end_locked(l, state_);
  return true;
}

const Config& Telemetry::config() const {
  static const auto* inert = new Config;
  return state_ ? state_->config : *inert;
}

RankInfo Telemetry::ranks() const { return state_ ? state_->ranks : RankInfo{}; }

GroupSet Telemetry::resolved_span_groups() const { return state_ ? state_->resolved_span_groups : GroupSet{}; }

const Sampler* Telemetry::sampler() const { return state_ ? state_->sampler.get() : nullptr; }

}  // namespace lens
