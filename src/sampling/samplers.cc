#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/registry.h"
#include "common/text.h"
#include "lens/config.h"
#include "lens/sampling.h"
#include "sampling/build.h"

namespace lens {

Sampler::~Sampler() = default;

namespace {

class AlwaysOn final : public Sampler {
 public:
  SamplingDecision should_sample(const SamplingParameters&) const noexcept override {
    return SamplingDecision::kRecordAndSample;
  }
  std::string description() const override { return "AlwaysOnSampler"; }
};

class AlwaysOff final : public Sampler {
 public:
  SamplingDecision should_sample(const SamplingParameters&) const noexcept override { return SamplingDecision::kDrop; }
  std::string description() const override { return "AlwaysOffSampler"; }
};

class TraceIdRatio final : public Sampler {
 public:
  explicit TraceIdRatio(double ratio) : ratio_(ratio), rule_(ratio) {}
  SamplingDecision should_sample(const SamplingParameters& p) const noexcept override {
    return rule_.keeps(p.trace_id) ? SamplingDecision::kRecordAndSample : SamplingDecision::kDrop;
  }
  std::string description() const override {
    char text[64];
    std::snprintf(text, sizeof text, "TraceIdRatioBased{%g}", ratio_);
    return text;
  }

 private:
  double ratio_;
  internal::TraceIdRatioRule rule_;
};

// The specification's defaults for the four parent cases: follow the parent's sampled flag.
class ParentBased final : public Sampler {
 public:
  explicit ParentBased(std::unique_ptr<Sampler> root) : root_(std::move(root)) {}
  SamplingDecision should_sample(const SamplingParameters& p) const noexcept override {
    if (p.parent == nullptr || !p.parent->is_valid()) return root_->should_sample(p);
    return p.parent->is_sampled() ? SamplingDecision::kRecordAndSample : SamplingDecision::kDrop;
  }
  std::string description() const override { return "ParentBased{root:" + root_->description() + "}"; }
  const Sampler& root() const noexcept { return *root_; }

 private:
  std::unique_ptr<Sampler> root_;
};

class RankGate final : public Sampler {
 public:
  RankGate(bool open, std::unique_ptr<Sampler> inner) : open_(open), inner_(std::move(inner)) {}
  SamplingDecision should_sample(const SamplingParameters& p) const noexcept override {
    return open_ ? inner_->should_sample(p) : SamplingDecision::kDrop;
  }
  std::string description() const override {
    return std::string("RankAware{rank:") + (open_ ? "open" : "closed") + ",sampler:" + inner_->description() + "}";
  }
  // The sampler that decides, when the gate lets it (null when the gate is closed).
  const Sampler* deciding() const noexcept { return open_ ? inner_.get() : nullptr; }

 private:
  bool open_;
  std::unique_ptr<Sampler> inner_;
};

internal::NamedRegistry<SamplingStrategyFactory>& registry() {
  // Leaked on purpose, like the rank strategies: usable from atexit handlers.
  static auto* r = new internal::NamedRegistry<SamplingStrategyFactory>(
      "sampling strategy", {{"rank_aware", [](SamplingStrategyInput in) {
                               bool open = sampled_rank_score(in.ranks.rank) < in.export_sample_rate;
                               return make_rank_gate_sampler(open, std::move(in.sdk_sampler));
                             }}});
  return *r;
}

}  // namespace

std::unique_ptr<Sampler> make_always_on_sampler() { return std::make_unique<AlwaysOn>(); }
std::unique_ptr<Sampler> make_always_off_sampler() { return std::make_unique<AlwaysOff>(); }
std::unique_ptr<Sampler> make_trace_id_ratio_sampler(double ratio) { return std::make_unique<TraceIdRatio>(ratio); }
std::unique_ptr<Sampler> make_parent_based_sampler(std::unique_ptr<Sampler> root) {
  if (!root) throw std::invalid_argument("lens: a parent-based sampler needs a root sampler");
  return std::make_unique<ParentBased>(std::move(root));
}
std::unique_ptr<Sampler> make_rank_gate_sampler(bool rank_open, std::unique_ptr<Sampler> inner) {
  if (!inner) throw std::invalid_argument("lens: a rank gate needs an inner sampler");
  return std::make_unique<RankGate>(rank_open, std::move(inner));
}

void register_sampling_strategy(std::string name, SamplingStrategyFactory factory, bool allow_override) {
  if (!factory) throw std::invalid_argument("lens: sampling strategy '" + name + "' has no factory");
  registry().add(std::move(name), std::move(factory), allow_override);
}
void unregister_sampling_strategy(std::string_view name) { registry().remove(name); }
std::vector<std::string> sampling_strategy_names() { return registry().names(); }
bool has_sampling_strategy(std::string_view name) { return registry().contains(name); }

namespace internal {

std::string registered_sampling_strategy(std::string_view written, std::string_view source) {
  return registry().resolve(written, source).first;
}

bool keeps_roots_and_follows_parents(const Sampler& sampler) noexcept {
  if (const auto* gate = dynamic_cast<const RankGate*>(&sampler))
    return gate->deciding() != nullptr && keeps_roots_and_follows_parents(*gate->deciding());
  const auto* parent_based = dynamic_cast<const ParentBased*>(&sampler);
  return parent_based != nullptr && dynamic_cast<const AlwaysOn*>(&parent_based->root()) != nullptr;
}

bool drops_every_span(const Sampler& sampler) noexcept {
  if (const auto* gate = dynamic_cast<const RankGate*>(&sampler))
    return gate->deciding() != nullptr && drops_every_span(*gate->deciding());
  return dynamic_cast<const AlwaysOff*>(&sampler) != nullptr;
}

std::unique_ptr<Sampler> make_sdk_sampler(TracesSampler kind, double ratio) {
  switch (kind) {
    case TracesSampler::kAlwaysOn: return make_always_on_sampler();
    case TracesSampler::kAlwaysOff: return make_always_off_sampler();
    case TracesSampler::kTraceIdRatio: return make_trace_id_ratio_sampler(ratio);
    case TracesSampler::kParentBasedAlwaysOn: return make_parent_based_sampler(make_always_on_sampler());
    case TracesSampler::kParentBasedAlwaysOff: return make_parent_based_sampler(make_always_off_sampler());
    case TracesSampler::kParentBasedTraceIdRatio: return make_parent_based_sampler(make_trace_id_ratio_sampler(ratio));
  }
  throw std::logic_error("lens: unhandled sampler kind");
}

TraceIdRatioRule::TraceIdRatioRule(double ratio) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) throw std::invalid_argument("lens: a trace-id ratio must be in [0, 1]");
  // round(ratio * 2^64) does not fit 64 bits when ratio is 1: then every trace is kept.
  keep_all_ = ratio >= 1.0;
  bound_ = keep_all_ ? 0 : static_cast<std::uint64_t>(std::round(std::ldexp(ratio, 64)));
}

std::unique_ptr<Sampler> build_sampler(const Config& config, const RankInfo& ranks) {
  std::unique_ptr<Sampler> sdk = make_sdk_sampler(config.traces_sampler, config.traces_sampler_ratio);
  if (config.sampling_strategy.empty()) return sdk;
  auto [name, factory] = registry().resolve(config.sampling_strategy, config.sampling_strategy_source);
  std::unique_ptr<Sampler> sampler = factory(SamplingStrategyInput{ranks, config.export_sample_rate, std::move(sdk)});
  if (!sampler) throw ConfigError("lens: sampling strategy '" + name + "' built no sampler");
  return sampler;
}

}  // namespace internal

}  // namespace lens
