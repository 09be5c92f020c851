// Building the sampler of a setup from its configuration.
#pragma once

#include <memory>

#include "lens/config.h"
#include "lens/sampling.h"

namespace lens::internal {

// The sampler OTEL_TRACES_SAMPLER names.
std::unique_ptr<Sampler> make_sdk_sampler(TracesSampler kind, double ratio);
// That sampler, wrapped by the SAMPLING_STRATEGY factory when one is set. Throws ConfigError.
std::unique_ptr<Sampler> build_sampler(const Config& config, const RankInfo& ranks);

}  // namespace lens::internal
