#include "lens/sampling.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lens/config.h"
#include "sampling/build.h"
#include "support/alloc_counter.h"

namespace lens {
namespace {

TraceId trace_with_low64(std::uint64_t low) {
  TraceId id;
  id.bytes[0] = 0xAB;  // the high half must not matter
  for (int i = 0; i < 8; ++i) id.bytes[15 - i] = static_cast<std::uint8_t>(low >> (8 * i));
  return id;
}

SamplingDecision root_decision(const Sampler& s, std::uint64_t low) {
  SamplingParameters p;
  p.trace_id = trace_with_low64(low);
  return s.should_sample(p);
}

SpanContext parent(bool sampled, bool remote) {
  SpanContext c;
  c.trace_id = trace_with_low64(1);
  c.span_id.bytes[7] = 1;
  c.trace_flags = sampled ? SpanContext::kSampledFlag : 0;
  c.is_remote = remote;
  return c;
}

constexpr auto kKeep = SamplingDecision::kRecordAndSample;
constexpr auto kDrop = SamplingDecision::kDrop;

TEST(TraceId, Low64IsTheBigEndianLowHalf) {
  EXPECT_EQ(trace_with_low64(0x0102030405060708ull).low64(), 0x0102030405060708ull);
}

TEST(Samplers, AlwaysOnAndOff) {
  EXPECT_EQ(root_decision(*make_always_on_sampler(), 0), kKeep);
  EXPECT_EQ(root_decision(*make_always_off_sampler(), 0), kDrop);
  EXPECT_EQ(make_always_on_sampler()->description(), "AlwaysOnSampler");
}

TEST(Samplers, TraceIdRatioUsesTheLow64BitsAgainstTheRoundedBound) {
  auto half = make_trace_id_ratio_sampler(0.5);
  const std::uint64_t bound = std::uint64_t{1} << 63;  // round(0.5 * 2^64)
  EXPECT_EQ(root_decision(*half, bound - 1), kKeep);
  EXPECT_EQ(root_decision(*half, bound), kDrop);
  EXPECT_EQ(root_decision(*half, 0), kKeep);
  auto tenth = make_trace_id_ratio_sampler(0.1);
  const auto tenth_bound = static_cast<std::uint64_t>(std::round(std::ldexp(0.1, 64)));
  EXPECT_EQ(root_decision(*tenth, tenth_bound - 1), kKeep);
  EXPECT_EQ(root_decision(*tenth, tenth_bound), kDrop);
  EXPECT_EQ(root_decision(*make_trace_id_ratio_sampler(1.0), ~std::uint64_t{0}), kKeep);
  EXPECT_EQ(root_decision(*make_trace_id_ratio_sampler(0.0), 0), kDrop);
  EXPECT_THROW(make_trace_id_ratio_sampler(1.5), std::invalid_argument);
  EXPECT_THROW(make_trace_id_ratio_sampler(std::nan("")), std::invalid_argument);
}

TEST(Samplers, TraceIdRatioKeepsAboutTheRatio) {
  auto s = make_trace_id_ratio_sampler(0.25);
  int kept = 0;
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 100000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: a spread of low halves
    kept += root_decision(*s, x) == kKeep;
  }
  EXPECT_NEAR(kept / 100000.0, 0.25, 0.01);
}

TEST(Samplers, ParentBasedFollowsAValidParentElseAsksTheRoot) {
  auto s = make_parent_based_sampler(make_always_off_sampler());
  for (bool remote : {false, true}) {
    SpanContext sampled = parent(true, remote), unsampled = parent(false, remote);
    SamplingParameters p;
    p.parent = &sampled;
    EXPECT_EQ(s->should_sample(p), kKeep);
    p.parent = &unsampled;
    EXPECT_EQ(s->should_sample(p), kDrop);
  }
  SpanContext invalid;  // all-zero ids: treated as no parent
  SamplingParameters p;
  p.parent = &invalid;
  EXPECT_EQ(s->should_sample(p), kDrop);
  auto on = make_parent_based_sampler(make_always_on_sampler());
  EXPECT_EQ(on->should_sample(p), kKeep);
  EXPECT_EQ(on->description(), "ParentBased{root:AlwaysOnSampler}");
}

TEST(Samplers, RankGate) {
  EXPECT_EQ(root_decision(*make_rank_gate_sampler(false, make_always_on_sampler()), 0), kDrop);
  EXPECT_EQ(root_decision(*make_rank_gate_sampler(true, make_always_on_sampler()), 0), kKeep);
}

TEST(Samplers, OnlyAlwaysOffIsKnownToDropEverySpan) {
  using internal::drops_every_span;
  EXPECT_TRUE(drops_every_span(*make_always_off_sampler()));
  EXPECT_TRUE(drops_every_span(*make_rank_gate_sampler(true, make_always_off_sampler())));
  // Each of these keeps some span (a sampled parent's child, a trace id below the ratio, another rank's): it is asked.
  EXPECT_FALSE(drops_every_span(*internal::build_sampler(Config{}, {})));
  EXPECT_FALSE(drops_every_span(*make_parent_based_sampler(make_always_off_sampler())));
  EXPECT_FALSE(drops_every_span(*make_trace_id_ratio_sampler(0.0)));
  EXPECT_FALSE(drops_every_span(*make_rank_gate_sampler(false, make_always_on_sampler())));
}

TEST(Samplers, OnlyAParentBasedAlwaysOnIsDecidedInline) {
  using internal::keeps_roots_and_follows_parents;
  EXPECT_TRUE(keeps_roots_and_follows_parents(*internal::build_sampler(Config{}, {})));  // the default
  EXPECT_TRUE(keeps_roots_and_follows_parents(*make_parent_based_sampler(make_always_on_sampler())));
  EXPECT_TRUE(keeps_roots_and_follows_parents(
      *make_rank_gate_sampler(true, make_parent_based_sampler(make_always_on_sampler()))));
  // Each of these decides otherwise for some span: it is asked.
  EXPECT_FALSE(keeps_roots_and_follows_parents(*make_always_on_sampler()));  // keeps an unsampled parent's child
  EXPECT_FALSE(keeps_roots_and_follows_parents(*make_parent_based_sampler(make_always_off_sampler())));
  EXPECT_FALSE(keeps_roots_and_follows_parents(*make_parent_based_sampler(make_trace_id_ratio_sampler(0.5))));
  EXPECT_FALSE(keeps_roots_and_follows_parents(
      *make_rank_gate_sampler(false, make_parent_based_sampler(make_always_on_sampler()))));
  struct Own final : Sampler {  // a strategy's own sampler
    SamplingDecision should_sample(const SamplingParameters&) const noexcept override {
      return SamplingDecision::kRecordAndSample;
    }
    std::string description() const override { return "Own"; }
  };
  EXPECT_FALSE(keeps_roots_and_follows_parents(Own{}));
  EXPECT_FALSE(keeps_roots_and_follows_parents(*make_parent_based_sampler(std::make_unique<Own>())));
}

TEST(Samplers, ADecisionDoesNotAllocate) {
  Config c;
  c.traces_sampler = TracesSampler::kParentBasedTraceIdRatio;
  c.traces_sampler_ratio = 0.3;
  c.sampling_strategy = "rank_aware";
  c.export_sample_rate = 1.0;
  auto sampler = internal::build_sampler(c, RankInfo{3, 8, 3});
  SpanContext p = parent(true, true);
  SamplingParameters with_parent;
  with_parent.parent = &p;
  long before = lens::testing::allocation_count();
  int kept = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    kept += root_decision(*sampler, i * 0x9E3779B97F4A7C15ull) == kKeep;
    kept += sampler->should_sample(with_parent) == kKeep;
  }
  EXPECT_EQ(lens::testing::allocation_count() - before, 0);
  EXPECT_GT(kept, 10000);
}

TEST(BuildSampler, FollowsOtelTracesSampler) {
  Config c;
  EXPECT_EQ(internal::build_sampler(c, {})->description(), "ParentBased{root:AlwaysOnSampler}");
  c.traces_sampler = TracesSampler::kParentBasedTraceIdRatio;
  c.traces_sampler_ratio = 0.1;
  EXPECT_EQ(internal::build_sampler(c, {})->description(), "ParentBased{root:TraceIdRatioBased{0.1}}");
  c.traces_sampler = TracesSampler::kAlwaysOff;
  EXPECT_EQ(internal::build_sampler(c, {})->description(), "AlwaysOffSampler");
}

TEST(BuildSampler, RankAwareGatesWithTheSampledRule) {
  Config c;
  c.sampling_strategy = "rank_aware";
  c.export_sample_rate = 0.1;
  // rank 3 scores 0.0883 (open), rank 0 scores 0.785 (closed).
  EXPECT_EQ(root_decision(*internal::build_sampler(c, {3, 8, 3}), 0), kKeep);
  EXPECT_EQ(root_decision(*internal::build_sampler(c, {0, 8, 0}), 0), kDrop);
  EXPECT_EQ(internal::build_sampler(c, {0, 8, 0})->description(),
            "RankAware{rank:closed,sampler:ParentBased{root:AlwaysOnSampler}}");
}

TEST(BuildSampler, CustomStrategyWrapsTheSdkSampler) {
  register_sampling_strategy("drop_all", [](SamplingStrategyInput) { return make_always_off_sampler(); });
  Config c;
  c.sampling_strategy = "drop_all";
  EXPECT_EQ(root_decision(*internal::build_sampler(c, {}), 0), kDrop);
  EXPECT_THROW(
      register_sampling_strategy("drop_all", [](SamplingStrategyInput in) { return std::move(in.sdk_sampler); }),
      std::invalid_argument);
  unregister_sampling_strategy("drop_all");
  EXPECT_THROW(internal::build_sampler(c, {}), ConfigError);
  EXPECT_THROW(unregister_sampling_strategy("rank_aware"), std::invalid_argument);
  register_sampling_strategy("null", [](SamplingStrategyInput) { return std::unique_ptr<Sampler>(); });
  c.sampling_strategy = "null";
  EXPECT_THROW(internal::build_sampler(c, {}), ConfigError);
  unregister_sampling_strategy("null");
}

}  // namespace
}  // namespace lens
