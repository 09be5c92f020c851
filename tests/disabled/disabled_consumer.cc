// A training program compiled with LENS_DISABLED: every lens call it makes must vanish. It is linked
// without lens, and check_no_lens_symbols.sh inspects its object file.
#include <cstdio>

#include "lens/lens.h"
#include "lens/log.h"
#include "lens/metrics.h"

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
  any = any || !telemetry.force_flush() || telemetry.span_stats().produced != 0;
  telemetry.shutdown();
  if (any || g_side_effects != 0) {
    std::fprintf(stderr, "LENS_DISABLED build did something\n");
    return 1;
  }
  std::printf("LENS_DISABLED build: nothing enabled, nothing evaluated\n");
  return 0;
}
