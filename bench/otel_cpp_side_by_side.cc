// lens beside the OpenTelemetry C++ SDK, in one binary and one run: each row the same span on both, with the same
// sampler and batch settings (queue 2048, batch 512, delay 5 s) and an exporter that discards each batch on both
// sides, so each figure is what the thread that makes the span pays. Recording rows run in bursts of kBurst spans with
// an untimed flush between them, so nothing is dropped, and print what was: `drop_ratio`. They also print
// `process_cpu_ns`, every thread's CPU over the spans made (the export side included, its flushes too).
//
// Built only where an OpenTelemetry C++ SDK is installed (bench/CMakeLists.txt: -DLENS_OTEL_CPP_PREFIX=...), never by
// the default build. Command, rounds and table: bench/otel_cpp_side_by_side.sh. Figures: docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "bench_support.h"
#include "lens/megatron.h"
#include "lens/span.h"
#include "opentelemetry/sdk/instrumentationscope/scope_configurator.h"
#include "opentelemetry/sdk/resource/resource.h"
#include "opentelemetry/sdk/trace/batch_span_processor_factory.h"
#include "opentelemetry/sdk/trace/batch_span_processor_options.h"
#include "opentelemetry/sdk/trace/exporter.h"
#include "opentelemetry/sdk/trace/random_id_generator_factory.h"
#include "opentelemetry/sdk/trace/samplers/always_off_factory.h"
#include "opentelemetry/sdk/trace/samplers/always_on_factory.h"
#include "opentelemetry/sdk/trace/samplers/parent_factory.h"
#include "opentelemetry/sdk/trace/span_data.h"
#include "opentelemetry/sdk/trace/tracer_config.h"
#include "opentelemetry/sdk/trace/tracer_provider.h"
#include "opentelemetry/sdk/trace/tracer_provider_factory.h"
#include "opentelemetry/trace/default_span.h"
#include "opentelemetry/trace/scope.h"
#include "opentelemetry/trace/span_context.h"

namespace {

namespace mg = lens::megatron::group;
namespace otel = opentelemetry;
namespace sdktrace = opentelemetry::sdk::trace;

constexpr std::int64_t kBurst = lens::bench::kBurst;

// ---- the floor, the same run ----

BENCHMARK(lens::bench::floor_two_span_clock_reads)->Name("BM_Floor_TwoSpanClockReads");
BENCHMARK(lens::bench::floor_two_steady_clock_reads)->Name("BM_Floor_TwoSteadyClockReads");
BENCHMARK(lens::bench::floor_relaxed_atomic_load)->Name("BM_Floor_RelaxedAtomicLoad");

// ---- lens: one setup a sampler, made again only when a case needs the other ----

lens::Telemetry& lens_with(lens::TracesSampler sampler) {
  static std::optional<lens::Telemetry> telemetry;
  static lens::TracesSampler current = lens::TracesSampler::kParentBasedAlwaysOn;
  if (!telemetry || current != sampler) {
    telemetry.reset();
    lens::Config config;
    config.span_groups = "per_step,microbatch";  // `optimizer` on, `layer` off; hang snapshots on, as by default
    config.traces_sampler = sampler;
    telemetry.emplace(lens::bench::setup_discarding(std::move(config)));
    current = sampler;
  }
  return *telemetry;
}

// `body` once an iteration in kept bursts (lens::bench::spans_in_bursts): drops and process CPU counted.
template <typename Body>
void lens_kept(benchmark::State& state, lens::TracesSampler sampler, Body body) {
  lens::bench::spans_in_bursts(state, lens_with(sampler), /*kept=*/true, body);
}

constexpr auto kParentBasedAlwaysOn = lens::TracesSampler::kParentBasedAlwaysOn;
constexpr auto kAlwaysOff = lens::TracesSampler::kAlwaysOff;

// ---- OpenTelemetry C++: one provider a sampler, BatchSpanProcessor defaults, an exporter that discards ----

std::atomic<std::uint64_t> g_otel_exported{0};

class CountingDiscardExporter final : public sdktrace::SpanExporter {
 public:
  std::unique_ptr<sdktrace::Recordable> MakeRecordable() noexcept override {
    return std::make_unique<sdktrace::SpanData>();
  }
  otel::sdk::common::ExportResult Export(
      const otel::nostd::span<std::unique_ptr<sdktrace::Recordable>>& spans) noexcept override {
    g_otel_exported.fetch_add(spans.size(), std::memory_order_relaxed);
    return otel::sdk::common::ExportResult::kSuccess;
  }
  bool ForceFlush(std::chrono::microseconds) noexcept override { return true; }
  bool Shutdown(std::chrono::microseconds) noexcept override { return true; }
};

enum class OtelSetup { kParentBasedAlwaysOn, kAlwaysOff, kTracerDisabled };

std::unique_ptr<sdktrace::TracerProvider> make_provider(OtelSetup setup) {
  auto processor = sdktrace::BatchSpanProcessorFactory::Create(std::make_unique<CountingDiscardExporter>(),
                                                               sdktrace::BatchSpanProcessorOptions{});
  std::unique_ptr<sdktrace::Sampler> sampler =
      setup == OtelSetup::kAlwaysOff ? sdktrace::AlwaysOffSamplerFactory::Create()
                                     : sdktrace::ParentBasedSamplerFactory::Create(std::shared_ptr<sdktrace::Sampler>(
                                           sdktrace::AlwaysOnSamplerFactory::Create()));
  // OpenTelemetry's run-time switch for a tracer: its TracerConfig, disabled for every scope here.
  auto configurator = std::make_unique<otel::sdk::instrumentationscope::ScopeConfigurator<sdktrace::TracerConfig>>(
      otel::sdk::instrumentationscope::ScopeConfigurator<sdktrace::TracerConfig>::Builder(
          setup == OtelSetup::kTracerDisabled ? sdktrace::TracerConfig::Disabled() : sdktrace::TracerConfig::Default())
          .Build());
  return sdktrace::TracerProviderFactory::Create(std::move(processor), otel::sdk::resource::Resource::Create({}),
                                                 std::move(sampler), sdktrace::RandomIdGeneratorFactory::Create(),
                                                 std::move(configurator));
}

struct OtelSide {
  std::unique_ptr<sdktrace::TracerProvider> provider;
  otel::nostd::shared_ptr<otel::trace::Tracer> tracer;
};

OtelSide& otel_with(OtelSetup setup) {
  static OtelSide sides[3];
  OtelSide& side = sides[static_cast<int>(setup)];
  if (!side.provider) {
    side.provider = make_provider(setup);
    side.tracer = side.provider->GetTracer("bench", "1.0");
  }
  return side;
}

template <typename Body>
void otel_kept(benchmark::State& state, OtelSetup setup, Body body) {
  OtelSide& side = otel_with(setup);
  side.provider->ForceFlush();
  const std::uint64_t exported_before = g_otel_exported.load();
  const double cpu_before = lens::bench::process_cpu_seconds();
  std::int64_t n = 0;
  for (auto _ : state) {
    body(*side.tracer);
    if (++n == kBurst) {
      state.PauseTiming();
      side.provider->ForceFlush();
      n = 0;
      state.ResumeTiming();
    }
  }
  side.provider->ForceFlush();
  if (state.thread_index() != 0) return;  // the counters of threads are summed: one thread's are the run's
  const double produced = static_cast<double>(state.iterations() * state.threads());
  const double exported = static_cast<double>(g_otel_exported.load() - exported_before);
  state.counters["drop_ratio"] = produced > 0 ? (produced - exported) / produced : 0;
  if (state.threads() == 1)
    state.counters["process_cpu_ns"] = (lens::bench::process_cpu_seconds() - cpu_before) * 1e9 / produced;
}

// A current span on OpenTelemetry: started, made active for its scope, ended.
inline void otel_current_span(otel::trace::Tracer& tracer, otel::nostd::string_view name) {
  auto span = tracer.StartSpan(name);
  auto scope = otel::trace::Tracer::WithActiveSpan(span);
  span->End();
}

// ---- the rows: a kept span made current, no attributes ----

void BM_CurrentSpan_Lens(benchmark::State& state) {
  lens_kept(state, kParentBasedAlwaysOn, [] { LENS_SPAN(mg::optimizer, "megatron.optimizer.step"); });
}
BENCHMARK(BM_CurrentSpan_Lens);

void BM_CurrentSpan_OtelCpp(benchmark::State& state) {
  otel_kept(state, OtelSetup::kParentBasedAlwaysOn,
            [](otel::trace::Tracer& tracer) { otel_current_span(tracer, "megatron.optimizer.step"); });
}
BENCHMARK(BM_CurrentSpan_OtelCpp);

// Four attributes: two integers, a double, a literal string.
void BM_FourAttributes_Lens(benchmark::State& state) {
  std::int64_t iteration = 0;
  lens_kept(state, kParentBasedAlwaysOn, [&] {
    LENS_SPAN(mg::optimizer, "megatron.optimizer.step", {"megatron.iteration", iteration},
              {"megatron.num_microbatches", 8}, {"megatron.loss", 2.31}, {"megatron.phase", "train"});
    ++iteration;
  });
}
BENCHMARK(BM_FourAttributes_Lens);

void BM_FourAttributes_OtelCpp(benchmark::State& state) {
  std::int64_t iteration = 0;
  otel_kept(state, OtelSetup::kParentBasedAlwaysOn, [&](otel::trace::Tracer& tracer) {
    auto span = tracer.StartSpan("megatron.optimizer.step", {{"megatron.iteration", iteration},
                                                             {"megatron.num_microbatches", 8},
                                                             {"megatron.loss", 2.31},
                                                             {"megatron.phase", "train"}});
    auto scope = otel::trace::Tracer::WithActiveSpan(span);
    span->End();
    ++iteration;
  });
}
BENCHMARK(BM_FourAttributes_OtelCpp);

// A child of the current span.
void BM_Child_Lens(benchmark::State& state) {
  lens_with(kParentBasedAlwaysOn);
  LENS_SPAN(mg::optimizer, "megatron.optimizer");
  lens_kept(state, kParentBasedAlwaysOn, [] { LENS_SPAN(mg::optimizer, "megatron.optimizer.step"); });
}
BENCHMARK(BM_Child_Lens);

void BM_Child_OtelCpp(benchmark::State& state) {
  OtelSide& side = otel_with(OtelSetup::kParentBasedAlwaysOn);
  auto parent = side.tracer->StartSpan("megatron.optimizer");
  auto scope = otel::trace::Tracer::WithActiveSpan(parent);
  otel_kept(state, OtelSetup::kParentBasedAlwaysOn,
            [](otel::trace::Tracer& tracer) { otel_current_span(tracer, "megatron.optimizer.step"); });
  parent->End();
}
BENCHMARK(BM_Child_OtelCpp);

// A span not made current: lens::Span; OpenTelemetry's StartSpan and End without a scope.
void BM_NotCurrent_Lens(benchmark::State& state) {
  lens_kept(state, kParentBasedAlwaysOn, [] { lens::Span span(mg::optimizer, "megatron.optimizer.step"); });
}
BENCHMARK(BM_NotCurrent_Lens);

void BM_NotCurrent_OtelCpp(benchmark::State& state) {
  otel_kept(state, OtelSetup::kParentBasedAlwaysOn,
            [](otel::trace::Tracer& tracer) { tracer.StartSpan("megatron.optimizer.step")->End(); });
}
BENCHMARK(BM_NotCurrent_OtelCpp);

// Two threads at once, each in kept bursts: the wall clock a span.
void BM_TwoProducers_Lens(benchmark::State& state) {
  lens_kept(state, kParentBasedAlwaysOn, [] { LENS_SPAN(mg::optimizer, "megatron.optimizer.step"); });
}
// Set up before the threads start (a case before it may have left the other sampler): never by two threads at once.
BENCHMARK(BM_TwoProducers_Lens)
    ->Setup([](const benchmark::State&) { lens_with(kParentBasedAlwaysOn); })
    ->Threads(2)
    ->UseRealTime();

void BM_TwoProducers_OtelCpp(benchmark::State& state) {
  otel_kept(state, OtelSetup::kParentBasedAlwaysOn,
            [](otel::trace::Tracer& tracer) { otel_current_span(tracer, "megatron.optimizer.step"); });
}
BENCHMARK(BM_TwoProducers_OtelCpp)
    ->Setup([](const benchmark::State&) { otel_with(OtelSetup::kParentBasedAlwaysOn); })
    ->Threads(2)
    ->UseRealTime();

// ---- spans that record nothing ----

constexpr const char* kUnsampledParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

// Under a remote parent that was sampled out: parentbased_always_on drops the child too.
void BM_SampledOut_Lens(benchmark::State& state) {
  lens_with(kParentBasedAlwaysOn);
  lens::ContextScope scope(*lens::from_traceparent(kUnsampledParent));
  for (auto _ : state) {
    LENS_SPAN(mg::optimizer, "megatron.optimizer.step");
  }
}
BENCHMARK(BM_SampledOut_Lens);

void BM_SampledOut_OtelCpp(benchmark::State& state) {
  otel::trace::Tracer& tracer = *otel_with(OtelSetup::kParentBasedAlwaysOn).tracer;
  const std::uint8_t trace_id[16] = {0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd,
                                     0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c};
  const std::uint8_t span_id[8] = {0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31};
  otel::nostd::shared_ptr<otel::trace::Span> parent(new otel::trace::DefaultSpan(otel::trace::SpanContext(
      otel::trace::TraceId(trace_id), otel::trace::SpanId(span_id), otel::trace::TraceFlags(0), /*is_remote=*/true)));
  auto scope = otel::trace::Tracer::WithActiveSpan(parent);
  for (auto _ : state) otel_current_span(tracer, "megatron.optimizer.step");
}
BENCHMARK(BM_SampledOut_OtelCpp);

// OTEL_TRACES_SAMPLER=always_off.
void BM_AlwaysOff_Lens(benchmark::State& state) {
  lens_with(kAlwaysOff);
  for (auto _ : state) {
    LENS_SPAN(mg::optimizer, "megatron.optimizer.step");
  }
}
BENCHMARK(BM_AlwaysOff_Lens);

void BM_AlwaysOff_OtelCpp(benchmark::State& state) {
  otel::trace::Tracer& tracer = *otel_with(OtelSetup::kAlwaysOff).tracer;
  for (auto _ : state) otel_current_span(tracer, "megatron.optimizer.step");
}
BENCHMARK(BM_AlwaysOff_OtelCpp);

// A span switched off at run time: lens's disabled group; OpenTelemetry's disabled tracer (its TracerConfig).
void BM_Disabled_Lens(benchmark::State& state) {
  lens_with(kParentBasedAlwaysOn);
  for (auto _ : state) {
    LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", 3});
  }
}
BENCHMARK(BM_Disabled_Lens);

void BM_Disabled_OtelCpp(benchmark::State& state) {
  otel::trace::Tracer& tracer = *otel_with(OtelSetup::kTracerDisabled).tracer;
  for (auto _ : state) {
    auto span = tracer.StartSpan("megatron.layer.forward", {{"megatron.layer_number", 3}});
    auto scope = otel::trace::Tracer::WithActiveSpan(span);
    span->End();
  }
}
BENCHMARK(BM_Disabled_OtelCpp);

}  // namespace
