// The span cases of span_benchmark.cc, each a fixed number of times in a function of its own, for
// bench/span_instructions.sh: callgrind counts each function's instructions on the calling thread, repeatable to
// the instruction where the wall clock of a VM is not. Spans go to the discarding exporter of the benchmarks, in
// bursts of kBurst with a flush between them outside the counted functions, so nothing is dropped.
#include <cstdint>
#include <cstdio>

#include "bench_support.h"
#include "lens/megatron.h"
#include "lens/span.h"

namespace {

namespace mg = lens::megatron::group;

constexpr int kBursts = 20;

// Every case: kBurst spans. Never inlined, so each has a name for callgrind_annotate.
#define LENS_INSTRUCTION_CASE(name, body)                    \
  __attribute__((noinline)) void name() {                    \
    for (std::int64_t i = 0; i < lens::bench::kBurst; ++i) { \
      body;                                                  \
    }                                                        \
  }

LENS_INSTRUCTION_CASE(case_kept_no_attributes, LENS_SPAN(mg::step, "megatron.train_step"))
LENS_INSTRUCTION_CASE(case_kept_four_attributes,
                      LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", i},
                                {"megatron.num_microbatches", 8}, {"megatron.loss", 2.31}, {"megatron.phase", "train"}))
LENS_INSTRUCTION_CASE(case_kept_nested_child, LENS_SPAN(mg::microbatch, "megatron.microbatch.forward"))
LENS_INSTRUCTION_CASE(case_disabled_group, LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", 3}))
LENS_INSTRUCTION_CASE(case_sampled_out, LENS_SPAN(mg::step, "megatron.train_step"))
LENS_INSTRUCTION_CASE(case_span_not_current, lens::Span span(mg::step, "megatron.train_step"))
// Under always_off, in a group outside the loop's (whose spans hang snapshots keep as positions).
LENS_INSTRUCTION_CASE(case_always_off, LENS_SPAN(mg::optimizer, "megatron.optimizer.step"))

template <typename Case>
void run(lens::Telemetry& t, Case each) {
  for (int burst = 0; burst < kBursts; ++burst) {
    each();
    t.force_flush();
  }
}

}  // namespace

int main() {
  lens::Telemetry& t = lens::bench::set_up();
  run(t, case_kept_no_attributes);
  run(t, case_kept_four_attributes);
  run(t, case_disabled_group);
  run(t, case_span_not_current);
  {
    LENS_SPAN(mg::step, "megatron.train_step");
    run(t, case_kept_nested_child);
  }
  {
    const lens::SpanContext dropped_parent =
        *lens::from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
    lens::ContextScope scope(dropped_parent);
    run(t, case_sampled_out);
  }
  const lens::SpanStats stats = t.span_stats();
  lens::Telemetry always_off = lens::bench::setup_discarding([] {
    lens::Config config;
    config.span_groups = "per_step,microbatch";
    config.traces_sampler = lens::TracesSampler::kAlwaysOff;
    return config;
  }());
  run(always_off, case_always_off);
  std::printf("spans: %llu produced, %llu dropped; each case %lld spans\n",
              static_cast<unsigned long long>(stats.produced), static_cast<unsigned long long>(stats.dropped()),
              static_cast<long long>(kBursts * lens::bench::kBurst));
  return stats.dropped() == 0 ? 0 : 1;
}
