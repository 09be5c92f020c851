// Encoding one 512-span batch (4 attributes per span: 2 int, 1 double, 1 literal string) as OTLP protobuf and as
// OTLP/JSON, beside a memcpy of as many bytes as the protobuf request has, in the same run; protobuf is meant to
// stay within 60 ns a span. The spans are LENS_SPANs, scope records (their attributes packed); the *SlotSpans cases
// encode the same spans recorded in slots (lens::Span).
//
// Command:  ./scripts/bench.sh   (medians of 15 repetitions)
// Figures and machine: docs/PERFORMANCE.md ("OTLP encoding").
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#include "lens/megatron.h"
#include "lens/span.h"
#include "telemetry/setup_internal.h"
#include "trace/scope_record.h"

namespace {

namespace mg = lens::megatron::group;

// Keeps the bytes of the first batch it is given.
class KeepFirstBatch final : public lens::internal::TelemetryExporter {
 public:
  std::vector<std::vector<std::uint8_t>>* records;
  lens::internal::ExportResult export_spans(const lens::internal::ExportBatch& batch,
                                            lens::internal::Deadline) override {
    if (records->empty()) {
      for (const std::uint8_t* r : batch.spans) {
        records->emplace_back(r, r + lens::internal::record_bytes(r));
      }
    }
    return lens::internal::ExportResult::kSuccess;
  }
};

struct Batch {
  std::vector<std::vector<std::uint8_t>> records;
  std::vector<const std::uint8_t*> spans;
  lens::internal::Resource resource;
  lens::internal::TimeMap time;
};

enum class Records { kScope, kSlot };

// 512 real spans, recorded through lens and captured as the exporter sees them.
Batch* record_batch(Records records) {
  auto* out = new Batch;
  {
    lens::Config config;
    config.catalogue = lens::megatron::catalogue();
    config.enabled = true;
    config.span_groups = "step";
    config.span_batch.max_export_batch_size = 512;
    auto exporter = std::make_unique<KeepFirstBatch>();
    exporter->records = &out->records;
    lens::Telemetry t = lens::internal::setup(
        config,
        {.rank = 0, .world_size = 1, .resource_attributes = {{"service.name", std::string("bench")}}, .reinit = true},
        std::move(exporter));
    for (std::int64_t i = 0; i < 512; ++i) {
      if (records == Records::kScope) {
        LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", i}, {"megatron.num_microbatches", 8},
                  {"megatron.loss", 2.31}, {"megatron.phase", "train"});
      } else {
        lens::Span span(mg::step, "megatron.train_step",
                        {{"megatron.iteration", i},
                         {"megatron.num_microbatches", 8},
                         {"megatron.loss", 2.31},
                         {"megatron.phase", "train"}});
      }
    }
    t.shutdown();
  }
  for (const auto& r : out->records) out->spans.push_back(r.data());
  out->resource.attributes = {{"service.name", std::string("bench")}};
  return out;
}

const Batch& batch(Records records = Records::kScope) {
  static Batch* scope = record_batch(Records::kScope);
  static Batch* slot = record_batch(Records::kSlot);
  return records == Records::kScope ? *scope : *slot;
}

// spans/s and ns per span, for a benchmark whose iteration handles the whole batch.
void report_per_span(benchmark::State& state, const Batch& b) {
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(b.spans.size()));
  state.counters["ns_per_span"] = benchmark::Counter(
      static_cast<double>(b.spans.size()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void protobuf_encode(benchmark::State& state, Records records) {
  const Batch& b = batch(records);
  lens::internal::WireBuffer out;
  for (auto _ : state) {
    lens::internal::encode_traces_proto(lens::internal::ExportBatch{b.resource, b.spans, b.time}, out);
    benchmark::DoNotOptimize(out.view().data());
  }
  state.counters["bytes_per_span"] = static_cast<double>(out.view().size()) / static_cast<double>(b.spans.size());
  report_per_span(state, b);
}
void BM_Otlp_ProtobufEncode512Spans(benchmark::State& state) { protobuf_encode(state, Records::kScope); }
BENCHMARK(BM_Otlp_ProtobufEncode512Spans);
void BM_Otlp_ProtobufEncode512SlotSpans(benchmark::State& state) { protobuf_encode(state, Records::kSlot); }
BENCHMARK(BM_Otlp_ProtobufEncode512SlotSpans);

void json_encode(benchmark::State& state, Records records) {
  const Batch& b = batch(records);
  std::string out;
  for (auto _ : state) {
    out.clear();
    lens::internal::encode_traces_json(lens::internal::ExportBatch{b.resource, b.spans, b.time}, out);
    benchmark::DoNotOptimize(out.data());
  }
  report_per_span(state, b);
}
void BM_Otlp_JsonEncode512Spans(benchmark::State& state) { json_encode(state, Records::kScope); }
BENCHMARK(BM_Otlp_JsonEncode512Spans);
void BM_Otlp_JsonEncode512SlotSpans(benchmark::State& state) { json_encode(state, Records::kSlot); }
BENCHMARK(BM_Otlp_JsonEncode512SlotSpans);

// The baseline: copying as many bytes as the protobuf request of the batch has.
void BM_Baseline_MemcpyOfTheProtobufBytes(benchmark::State& state) {
  const Batch& b = batch();
  lens::internal::WireBuffer wire;
  lens::internal::encode_traces_proto(lens::internal::ExportBatch{b.resource, b.spans, b.time}, wire);
  std::string proto(wire.view());
  std::string copy(proto.size(), '\0');
  for (auto _ : state) {
    std::memcpy(copy.data(), proto.data(), proto.size());
    benchmark::DoNotOptimize(copy.data());
    benchmark::ClobberMemory();
  }
  report_per_span(state, b);
}
BENCHMARK(BM_Baseline_MemcpyOfTheProtobufBytes);

}  // namespace
