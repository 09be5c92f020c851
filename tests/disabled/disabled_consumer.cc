// A training program compiled with LENS_DISABLED: every lens call it makes must vanish. It is linked
// without lens, and check_no_lens_symbols.sh inspects its object file.
#include <cstdio>
#include <span>
#include <utility>

#include "lens/lens.h"
#include "lens/log.h"
#include "lens/metrics.h"
#include "lens/ranks.h"
#include "lens/resource.h"
#include "lens/sampling.h"

namespace {
int g_side_effects = 0;
lens::SpanGroup expensive_group() {
  ++g_side_effects;  // must never run: a disabled macro does not evaluate its argument
  return lens::group::step;
}
}  // namespace

int main() {
  lens::Config config = lens::megatron::config_from_env();
  config.apply_cli(true, "svc", "all");
  lens::Telemetry telemetry = lens::setup_telemetry(config, {.rank = 0, .world_size = 1});
  lens::set_enabled_span_groups(lens::megatron::catalogue().all());
  bool any = LENS_GROUP_ENABLED(expensive_group()) || lens::is_enabled(lens::megatron::group::layer) ||
             telemetry.is_exporting() || !lens::enabled_span_groups().empty() ||
             !lens::resolve(lens::megatron::catalogue(), "all", "x").empty();
  {
    LENS_SPAN(expensive_group(), "never", {"x", ++g_side_effects});
    const int used_only_in_a_span = 3;
    LENS_SPAN(lens::group::step, "never.checked", {"v", used_only_in_a_span});
    LENS_SPAN_IF(++g_side_effects > 0, expensive_group(), "never.if");
    LENS_SPAN_NAMED(named, lens::megatron::group::step, "never.named");
    named.set_attribute("k", 1);
    named.add_event("e");
    LENS_TRACE_REGION("region");
    lens::Span manual(lens::group::job, "manual");
    manual.set_status(lens::StatusCode::kError, "x");
    manual.end();
    lens::ContextScope scope(lens::current_context());
    auto f = lens::traced(lens::group::step, "traced", [](int x) { return x + 1; });
    any = any || f(1) != 2 || manual.is_recording() || lens::from_traceparent(lens::to_traceparent({})).has_value();
  }
  {
    static auto counter = lens::metrics::counter<std::int64_t>("never.counter");
    static auto histogram = lens::metrics::histogram<double>("never.histogram", {.unit = "ms"});
    counter.add(1);
    counter.add(1, {{"k", "v"}});
    histogram.record(2.5);
    lens::megatron::record_training_metrics({.loss = 1.0});
    lens::log(lens::Severity::kError, "never", {{"k", 1}});
    any = any || lens::should_log(lens::Severity::kFatal) ||
          !lens::megatron::resource_attributes(lens::megatron::TrainingArgs{}).empty();
  }
  {
    // Ranks, sampling and the resource: registries that hold nothing, detection that reads nothing.
    lens::register_rank_strategy("never", [](const lens::RankStrategyInput&) { return true; });
    lens::register_sampling_strategy("never", [](lens::SamplingStrategyInput in) { return std::move(in.sdk_sampler); });
    any = any || lens::has_rank_strategy("never") || !lens::rank_strategy_names().empty() ||
          lens::rank_exports("all_ranks", {}) || lens::detect_rank_info(3, 4).rank != 0 ||
          lens::sampled_rank_score(0) != 0 || lens::has_sampling_strategy("never") ||
          !lens::sampling_strategy_names().empty() || lens::make_trace_id_ratio_sampler(0.5) != nullptr ||
          lens::make_parent_based_sampler(lens::make_always_on_sampler()) != nullptr || !lens::uuid5_url("x").empty() ||
          !lens::run_uuids().job_uuid.empty() || lens::detect_gpu_identity(0).has_value() ||
          !lens::detect_resource().empty() || lens::resolve_run_id(config) != config.run_id;
    lens::unregister_rank_strategy("never");
    lens::unregister_sampling_strategy("never");
  }
  {  // the straggler search (lens/straggler.h): the phase scope does not evaluate its argument
    LENS_STEP_PHASE((++g_side_effects, lens::StepPhase::kCompute));
    lens::end_step(1);
    const lens::StragglerSummary summary = lens::take_straggler_summary(20, 0);
    any = any || lens::straggler_summary_due(20) || summary.steps != 0 ||
          lens::score_stragglers(20, std::span<const lens::StragglerSummary>(&summary, 1)) ||
          lens::take_straggler_findings().has_value();
  }
  any = any || !telemetry.force_flush() || telemetry.span_stats().produced != 0;
  telemetry.shutdown();
  if (any || g_side_effects != 0) {
    std::fprintf(stderr, "LENS_DISABLED build did something\n");
    return 1;
  }
  std::printf("LENS_DISABLED build: nothing enabled, nothing evaluated\n");
  return 0;
}
