// OTLP export end to end, in one run with its baselines:
//  - BM_EndToEnd/<protocol>: 20,000 spans (4 attributes each) recorded, then flushed to @elastic/mockotlpserver
//    on loopback (started here from tests/peers; it decodes every request), over http/protobuf and grpc:
//    exported spans/s. Baseline: the same through an exporter that drops batches on arrival (the pipeline alone).
//  - BM_SpanCost/<collector>: the training thread's cost of one span while the OTLP/HTTP collector never answers
//    and the queue is full (drops counted), beside the same span with the collector-free exporter: a collector
//    that never answers must cost the training thread at most 2x.
//
// Command:  ./scripts/bench.sh   (or build/bench/lens_export_benchmark --benchmark_repetitions=5)
// Figures and machine: docs/PERFORMANCE.md ("OTLP end to end and under a stalled collector").
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "bench_support.h"
#include "lens/span.h"
#include "support/mock_otlp_server.h"

namespace {

namespace mg = lens::megatron::group;
constexpr int kSpans = 20000;

lens::Config otlp_config(lens::OtlpProtocol protocol, const std::string& endpoint, std::int64_t queue) {
  lens::Config c;
  c.catalogue = lens::megatron::catalogue();
  c.enabled = true;
  c.span_groups = "all";
  c.metrics_enabled = false;
  c.exporter = lens::Exporter::kOtlp;
  c.span_batch.max_queue_size = queue;
  c.span_batch.max_export_batch_size = 512;
  c.span_batch.export_timeout_ms = 10000;
  c.otlp_traces.protocol = protocol;
  c.otlp_traces.endpoint = endpoint;
  return c;
}

void record_spans(int n) {
  for (int i = 0; i < n; ++i) {
    LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", i}, {"megatron.loss", 2.5},
              {"megatron.phase", "train"}, {"megatron.microbatch", i & 7});
  }
}

// Records kSpans spans, flushes them, and reports exported spans per second of that whole time.
void run_end_to_end(benchmark::State& state, lens::Telemetry& t) {
  std::uint64_t exported = 0, dropped = 0;
  for (auto _ : state) {
    std::uint64_t before = t.span_stats().exported;
    record_spans(kSpans);
    t.force_flush(std::chrono::seconds(60));
    exported += t.span_stats().exported - before;
  }
  dropped = t.span_stats().dropped();
  state.counters["exported_spans_per_s"] =
      benchmark::Counter(static_cast<double>(exported), benchmark::Counter::kIsRate);
  state.counters["dropped"] = static_cast<double>(dropped);
  t.shutdown();
}

void BM_EndToEnd_Loopback(benchmark::State& state, lens::OtlpProtocol protocol) {
  static lens::testing::MockOtlpServer receiver("/dev/null");
  if (!receiver.ready()) {
    state.SkipWithError("mockotlpserver did not start (tests/peers not installed?)");
    return;
  }
  const char* endpoint = protocol == lens::OtlpProtocol::kGrpc ? "http://127.0.0.1:4317" : "http://127.0.0.1:4318";
  lens::Telemetry t =
      lens::setup_telemetry(otlp_config(protocol, endpoint, 2 * kSpans), {.rank = 0, .world_size = 1, .reinit = true});
  run_end_to_end(state, t);
}
BENCHMARK_CAPTURE(BM_EndToEnd_Loopback, http_protobuf, lens::OtlpProtocol::kHttpProtobuf)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_EndToEnd_Loopback, grpc, lens::OtlpProtocol::kGrpc)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EndToEnd_Baseline_DiscardExporter(benchmark::State& state) {
  lens::Telemetry t = lens::internal::setup(otlp_config(lens::OtlpProtocol::kHttpProtobuf, "", 2 * kSpans),
                                            {.rank = 0, .world_size = 1, .reinit = true},
                                            std::make_unique<lens::bench::DiscardExporter>());
  run_end_to_end(state, t);
}
BENCHMARK(BM_EndToEnd_Baseline_DiscardExporter)->Unit(benchmark::kMillisecond)->UseRealTime();

// A loopback port that accepts connections (the kernel's backlog) but never reads or answers.
int silent_listener(int& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 16);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  port = ntohs(a.sin_port);
  return fd;
}

void span_cost(benchmark::State& state, lens::Telemetry& t) {
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(mg::step, "megatron.train_step", {"megatron.iteration", i}, {"megatron.loss", 2.5},
              {"megatron.phase", "train"}, {"megatron.microbatch", i & 7});
    ++i;
  }
  lens::SpanStats s = t.span_stats();
  state.counters["dropped_queue_full"] = static_cast<double>(s.dropped_queue_full);
  t.shutdown(std::chrono::milliseconds(200));
}

void BM_SpanCost_CollectorNeverAnswers(benchmark::State& state) {
  int port = 0;
  int fd = silent_listener(port);
  lens::Telemetry t = lens::setup_telemetry(
      otlp_config(lens::OtlpProtocol::kHttpProtobuf, "http://127.0.0.1:" + std::to_string(port), 2048),
      {.rank = 0, .world_size = 1, .reinit = true});
  span_cost(state, t);
  ::close(fd);
}
BENCHMARK(BM_SpanCost_CollectorNeverAnswers);

void BM_SpanCost_Baseline_CollectorFree(benchmark::State& state) {
  lens::Telemetry t = lens::internal::setup(otlp_config(lens::OtlpProtocol::kHttpProtobuf, "", 2048),
                                            {.rank = 0, .world_size = 1, .reinit = true},
                                            std::make_unique<lens::bench::DiscardExporter>());
  span_cost(state, t);
}
BENCHMARK(BM_SpanCost_Baseline_CollectorFree);

}  // namespace
