// lens/sampling.h: which traces an exporting rank keeps (CONTRACT §4).
//
// The sampler comes from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, as the OpenTelemetry specification
// defines them (default parentbased_always_on). The trace-id ratio test uses the low 64 bits of the trace id,
// `low64 < round(ratio * 2^64)`, as the Python, Go and Java SDKs do, so one trace is kept or dropped alike in
// every language. SAMPLING_STRATEGY=rank_aware puts a per-rank gate (the `sampled` rank rule at
// EXPORT_SAMPLE_RATE) in front of that sampler. A decision never allocates, locks or throws.
//
//   lens::register_sampling_strategy("errors_only", [](lens::SamplingStrategyInput in) {
//     return std::make_unique<MySampler>(std::move(in.sdk_sampler));
//   });
//   // then MYTRAINER_OTEL_SAMPLING_STRATEGY=errors_only
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lens/context.h"
#include "lens/internal/visibility.h"
#include "lens/ranks.h"

namespace lens {

enum class SamplingDecision : unsigned char { kDrop, kRecordOnly, kRecordAndSample };

struct SamplingParameters {
  const SpanContext* parent = nullptr;  // nullptr or invalid: a root span
  TraceId trace_id;                     // the new span's trace id (the parent's, or a fresh one for a root)
  std::string_view name;
};

class LENS_API Sampler {
 public:
#if !defined(LENS_DISABLED)
  virtual ~Sampler();
#else
  virtual ~Sampler() = default;
#endif
  // Must not allocate, lock or throw: it runs on the training thread for every span of an enabled group.
  virtual SamplingDecision should_sample(const SamplingParameters& params) const noexcept = 0;
  // As the OpenTelemetry specification spells it, e.g. "ParentBased{root:TraceIdRatioBased{0.1}}".
  virtual std::string description() const = 0;
};

// What a sampling strategy builds from.
struct SamplingStrategyInput {
  RankInfo ranks;
  double export_sample_rate = 1.0;
  std::unique_ptr<Sampler> sdk_sampler;  // the one OTEL_TRACES_SAMPLER asks for
};
using SamplingStrategyFactory = std::function<std::unique_ptr<Sampler>(SamplingStrategyInput)>;

#if !defined(LENS_DISABLED)

LENS_API std::unique_ptr<Sampler> make_always_on_sampler();
LENS_API std::unique_ptr<Sampler> make_always_off_sampler();
// ratio outside [0, 1] or NaN throws std::invalid_argument.
LENS_API std::unique_ptr<Sampler> make_trace_id_ratio_sampler(double ratio);
// Follows a valid parent's sampled flag; asks `root` for root spans.
LENS_API std::unique_ptr<Sampler> make_parent_based_sampler(std::unique_ptr<Sampler> root);
// Drops every span when `rank_open` is false, else asks `inner`.
LENS_API std::unique_ptr<Sampler> make_rank_gate_sampler(bool rank_open, std::unique_ptr<Sampler> inner);

// Adds a strategy for SAMPLING_STRATEGY. An existing name throws std::invalid_argument unless allow_override.
LENS_API void register_sampling_strategy(std::string name, SamplingStrategyFactory factory,
                                         bool allow_override = false);
// Removes one; `rank_aware` or an unknown name throws std::invalid_argument.
LENS_API void unregister_sampling_strategy(std::string_view name);
LENS_API std::vector<std::string> sampling_strategy_names();
LENS_API bool has_sampling_strategy(std::string_view name);

#else  // LENS_DISABLED: header-only no-ops; no sampler is made (nothing is recorded to sample).

inline std::unique_ptr<Sampler> make_always_on_sampler() { return nullptr; }
inline std::unique_ptr<Sampler> make_always_off_sampler() { return nullptr; }
inline std::unique_ptr<Sampler> make_trace_id_ratio_sampler(double) { return nullptr; }
inline std::unique_ptr<Sampler> make_parent_based_sampler(std::unique_ptr<Sampler>) { return nullptr; }
inline std::unique_ptr<Sampler> make_rank_gate_sampler(bool, std::unique_ptr<Sampler>) { return nullptr; }
inline void register_sampling_strategy(std::string, SamplingStrategyFactory, bool = false) {}
inline void unregister_sampling_strategy(std::string_view) {}
inline std::vector<std::string> sampling_strategy_names() { return {}; }
inline bool has_sampling_strategy(std::string_view) { return false; }

#endif

}  // namespace lens
