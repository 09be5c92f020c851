// The training thread's cost of a device-timed span (docs/GPU.md): the same `layer` span with device timing off and on,
// on the CUDA runtime's simulator (tests/support/fake_cudart.cc, whose cudaEventRecord takes a lock and wakes its
// stream's thread), and the simulator's own calls alone, so lens's share is the difference; and with NVTX ranges, on a
// stand-in that only counts its stack's depth (NVIDIA's library with no tool attached does about as little), so the
// difference is lens's NVTX part and two calls into the library. Spans run in bursts of
// 1,000 with an untimed flush between them, so every pair is polled back; `drop_ratio` and `device_skip_ratio` say
// what was not kept.
//
//   build/bench/lens_device_benchmark --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <cstdint>

#include "bench_support.h"
#include "device/cuda_runtime.h"
#include "device/device_timing.h"
#include "device/nvtx.h"
#include "lens/device.h"
#include "lens/span.h"

namespace {

namespace mg = lens::megatron::group;
using lens::internal::cuda_runtime;
using lens::internal::CudaRuntime;

lens::Telemetry set_up(bool device_timing, bool nvtx = false) {
  setenv("LENS_CUDART_LIBRARY", LENS_FAKE_CUDART, 1);
  if (nvtx)
    setenv("NVTX_INJECTION64_PATH", LENS_FAKE_NVTX_NOOP, 1);  // a stand-in NVTX tool, attached as Nsight attaches
  else
    unsetenv("NVTX_INJECTION64_PATH");
  lens::internal::reset_nvtx_for_testing();
  lens::Config config;
  config.span_groups = "all";
  config.device_timing = device_timing ? lens::DeviceTiming::kCuda : lens::DeviceTiming::kNone;
  return lens::bench::setup_discarding(config);
}

// A stream of the simulator's (the library lens loads by the same path: one instance).
void* simulator_stream() {
  void* library = dlopen(LENS_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
  auto* create =
      library != nullptr ? reinterpret_cast<void* (*)()>(dlsym(library, "fake_cuda_stream_create")) : nullptr;
  return create != nullptr ? create() : nullptr;
}

std::uint64_t device_skips() {
  const lens::internal::DeviceCounts d = lens::internal::device_counts();
  return d.skipped_pool_exhausted + d.skipped_capturing + d.skipped_error;
}

void layer_spans(benchmark::State& state, bool device_timing, bool nvtx = false) {
  lens::Telemetry t = set_up(device_timing, nvtx);
  if (nvtx && lens::internal::nvtx() == nullptr) {
    t.shutdown();
    state.SkipWithError("no NVTX stand-in");
    return;
  }
  lens::set_device_stream(simulator_stream());
  const std::uint64_t skipped_before = device_skips();
  lens::bench::spans_in_bursts(state, t, true, [] { LENS_SPAN(mg::layer, "megatron.layer.forward"); });
  const auto spans = static_cast<double>(state.iterations());
  state.counters["device_skip_ratio"] = static_cast<double>(device_skips() - skipped_before) / spans;
  lens::set_device_stream(nullptr);
  t.shutdown();
}

void BM_Device_LayerSpan_HostOnly(benchmark::State& state) { layer_spans(state, false); }
BENCHMARK(BM_Device_LayerSpan_HostOnly);

void BM_Device_LayerSpan_DeviceTimed(benchmark::State& state) { layer_spans(state, true); }
BENCHMARK(BM_Device_LayerSpan_DeviceTimed);

void BM_Device_LayerSpan_DeviceTimedWithNvtx(benchmark::State& state) { layer_spans(state, true, true); }
BENCHMARK(BM_Device_LayerSpan_DeviceTimedWithNvtx);

// What a device-timed span asks of the runtime, without lens: the capture check and the record, at each end.
void BM_Device_SimulatorCallsAlone(benchmark::State& state) {
  setenv("LENS_CUDART_LIBRARY", LENS_FAKE_CUDART, 1);
  const CudaRuntime* cuda = cuda_runtime();
  if (cuda == nullptr) {
    state.SkipWithError("no simulator");
    return;
  }
  auto s = static_cast<lens::internal::cudaStream_t>(simulator_stream());
  lens::internal::cudaEvent_t start = nullptr, end = nullptr;
  cuda->event_create_with_flags(&start, lens::internal::kCudaEventDefault);
  cuda->event_create_with_flags(&end, lens::internal::kCudaEventDefault);
  int status = 0;
  for (auto _ : state) {
    cuda->stream_is_capturing(s, &status);
    cuda->event_record(start, s);
    cuda->stream_is_capturing(s, &status);
    cuda->event_record(end, s);
  }
}
BENCHMARK(BM_Device_SimulatorCallsAlone);

}  // namespace
