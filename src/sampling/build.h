// Building the sampler of a setup from its configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lens/config.h"
#include "lens/context.h"
#include "lens/sampling.h"

namespace lens::internal {

// OpenTelemetry's trace-id ratio rule: keep when the id's low 64 bits are below ratio * 2^64 (every id at 1).
class TraceIdRatioRule {
 public:
  explicit TraceIdRatioRule(double ratio = 1.0);  // throws std::invalid_argument outside [0, 1]
  bool keeps(const TraceId& id) const noexcept { return keep_all_ || id.low64() < bound_; }

 private:
  bool keep_all_ = true;
  std::uint64_t bound_ = 0;
};

// True for a sampler that keeps every root span and follows a parent's sampled flag: the default
// (parentbased_always_on), also behind an open rank gate. The span path decides for it inline, without its virtual
// calls.
bool keeps_roots_and_follows_parents(const Sampler& sampler) noexcept;

// True for a sampler that drops every span whatever its parent: always_off, also behind an open rank gate. Known at
// setup, so the span path never asks it: the enabled groups record nothing (groups/switch.h).
bool drops_every_span(const Sampler& sampler) noexcept;
// The sampler OTEL_TRACES_SAMPLER names.
std::unique_ptr<Sampler> make_sdk_sampler(TracesSampler kind, double ratio);
// The registered sampling strategy a configuration's name means: itself, else its lower case (the built-ins are
// lower-case). A ConfigError naming `written`, `source` (where it was chosen) and every registered name when neither
// is registered.
std::string registered_sampling_strategy(std::string_view written, std::string_view source);
// That sampler, wrapped by the SAMPLING_STRATEGY factory when one is set. Throws ConfigError.
std::unique_ptr<Sampler> build_sampler(const Config& config, const RankInfo& ranks);

}  // namespace lens::internal
