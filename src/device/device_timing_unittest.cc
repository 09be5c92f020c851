// Device spans (src/device/device_timing.h) end to end, against the CUDA runtime's simulator built as
// libcudart.so.12 (tests/support/fake_cudart.cc): a span of a device-timed group around simulated kernels gets a
// child span with the kernels' time, the training thread only records, a capturing stream and an exhausted pool keep
// host time and are counted, a pair that never completes is dropped and counted at shutdown, and no runtime means
// host time only.
#include "device/device_timing.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "device/cuda_runtime.h"
#include "device/driver_thread.h"
#include "lens/device.h"
#include "lens/span.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::attribute;
using testing::json;

// One of the simulator's controls.
template <typename F>
F* control(const char* name) {
  void* library = dlopen(LENS_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(library, nullptr);
  return reinterpret_cast<F*>(dlsym(library, name));
}
void* new_stream() { return control<void*()>("fake_cuda_stream_create")(); }
void launch(void* stream, double micros) { control<void(void*, double)>("fake_cuda_launch_kernel")(stream, micros); }
long calls_here(const char* function) { return control<long(const char*)>("fake_cuda_calls_on_this_thread")(function); }

Config device_config(std::string device_groups = "") {
  Config c = testing::capture_config("all");
  c.device_timing = DeviceTiming::kCuda;
  c.device_span_groups = std::move(device_groups);
  c.span_batch.max_queue_size = 65536;
  return c;
}

std::int64_t nanos(const json& span, const char* field) { return std::stoll(span[field].get<std::string>()); }
double millis(const json& span) {
  return static_cast<double>(nanos(span, "endTimeUnixNano") - nanos(span, "startTimeUnixNano")) / 1e6;
}

// The exported spans whose name ends with `suffix`, once there are `n` of them (or 10 s have passed).
std::vector<json> wait_for(testing::Capture& c, const std::string& suffix, std::size_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::vector<json> found;
    for (json& s : c.spans())
      if (s["name"].get<std::string>().ends_with(suffix)) found.push_back(std::move(s));
    if (found.size() >= n || std::chrono::steady_clock::now() > until) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

class DeviceTiming : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("LENS_CUDART_LIBRARY", LENS_FAKE_CUDART, 1);
    unsetenv("NVTX_INJECTION64_PATH");  // no NVTX tool: NVTX's own test attaches its stand-in
    internal::reset_cuda_runtime_for_testing();
    internal::reset_nvtx_for_testing();
  }
  void TearDown() override {
    set_device_stream(nullptr);
    unsetenv("LENS_CUDART_LIBRARY");
    unsetenv("NVTX_INJECTION64_PATH");
    internal::reset_cuda_runtime_for_testing();
    internal::reset_nvtx_for_testing();
  }
};

TEST_F(DeviceTiming, ADeviceSpanIsTheKernelsTimeAsAChildOfItsHostSpan) {
  testing::Capture c(device_config());
  void* stream = new_stream();
  set_device_stream(stream);
  { LENS_SPAN(mg::forward_backward, "warm-up"); }  // the thread's pool made, its first events created
  ASSERT_EQ(wait_for(c, ".device", 1).size(), 1u);
  const auto launched = std::chrono::system_clock::now();
  launch(stream, 50'000);  // the stream is busy 50 ms when the span starts
  {
    LENS_SPAN(mg::forward_backward, "megatron.forward_backward");
    launch(stream, 20'000);
  }  // the host span ends at once: only launched
  ASSERT_EQ(wait_for(c, ".device", 2).size(), 2u);
  const json host = c.span("megatron.forward_backward");
  const json d = c.span("megatron.forward_backward.device");
  ASSERT_FALSE(host.is_null());
  ASSERT_FALSE(d.is_null());
  EXPECT_EQ(d["name"], "megatron.forward_backward.device");
  EXPECT_EQ(d["traceId"], host["traceId"]);
  EXPECT_EQ(d["parentSpanId"], host["spanId"]);
  EXPECT_EQ(d["kind"], 1) << "INTERNAL";
  EXPECT_EQ(attribute(d, "lens.device")["stringValue"], "cuda:0");
  EXPECT_NEAR(millis(d), 20.0, 0.2) << "the kernel's 20 ms (1 %)";
  EXPECT_LT(millis(host), 10.0) << "the host span only launched it";
  // The device began when the stream reached the span: when the 50 ms kernel launched before it ended (the
  // calibration and the simulator's thread wake-ups cost at most a few ms here), after the host span began. Measured
  // from the host span's start it was 41.6 ms once, in an ASan run: the thread had waited 8 ms between the launch and
  // the span.
  const auto launched_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(launched.time_since_epoch()).count();
  const double from_launch_ms = static_cast<double>(nanos(d, "startTimeUnixNano") - launched_ns) / 1e6;
  EXPECT_NEAR(from_launch_ms, 50.0, 5.0);
  EXPECT_GT(nanos(d, "startTimeUnixNano"), nanos(host, "startTimeUnixNano"));
  EXPECT_EQ(internal::device_counts().dropped_error, 0u);
}

TEST_F(DeviceTiming, TheTrainingThreadOnlyRecordsNeverQueriesOrSynchronizes) {
  testing::Capture c(device_config());
  void* stream = new_stream();
  set_device_stream(stream);
  const char* const kNever[] = {"cudaEventQuery", "cudaEventElapsedTime", "cudaEventSynchronize",
                                "cudaStreamSynchronize", "cudaDeviceSynchronize"};
  std::map<std::string, long> before;
  for (const char* f : kNever) before[f] = calls_here(f);
  const long records = calls_here("cudaEventRecord"), checks = calls_here("cudaStreamIsCapturing");
  for (int i = 0; i < 10; ++i) {
    LENS_SPAN(mg::layer, "megatron.layer.forward");
    launch(stream, 1'000);
  }
  ASSERT_EQ(wait_for(c, ".device", 10).size(), 10u);
  EXPECT_EQ(calls_here("cudaEventRecord") - records, 20) << "a start and an end a span";
  EXPECT_EQ(calls_here("cudaStreamIsCapturing") - checks, 20);
  for (const char* never : kNever) EXPECT_EQ(calls_here(never), before[never]) << never << " on the training thread";
}

TEST_F(DeviceTiming, OnlyTheDeviceSpanGroupsAreTimedAndACopiedNameIsKept) {
  testing::Capture c(device_config("layer"));
  set_device_stream(new_stream());
  { LENS_SPAN(mg::forward_backward, "megatron.forward_backward"); }
  {
    const std::string name = "megatron.layer." + std::to_string(7);  // not a literal: copied
    LENS_SPAN(mg::layer, name);
  }
  const std::vector<json> device = wait_for(c, ".device", 1);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_EQ(device[0]["name"], "megatron.layer.7.device");
  EXPECT_FALSE(c.span("megatron.forward_backward").is_null());
}

TEST_F(DeviceTiming, ACapturingStreamIsNotRecordedOnAndTheSkipIsCounted) {
  testing::Capture c(device_config());
  void* captured = new_stream();
  void* other = new_stream();
  const long* records_while_capturing = control<long>("fake_cuda_records_while_capturing");
  const long before = *records_while_capturing;
  const std::uint64_t skipped = internal::device_counts().skipped_capturing;
  control<void(void*)>("fake_cuda_begin_capture")(captured);
  set_device_stream(captured);
  { LENS_SPAN(mg::layer, "megatron.layer.captured"); }
  // Another stream is timed meanwhile: the export thread may query while this thread captures (relaxed mode).
  set_device_stream(other);
  { LENS_SPAN(mg::layer, "megatron.layer.other"); }
  const std::vector<json> device = wait_for(c, ".device", 1);
  control<void(void*)>("fake_cuda_end_capture")(captured);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_EQ(device[0]["name"], "megatron.layer.other.device");
  EXPECT_EQ(*records_while_capturing, before) << "nothing entered the graph";
  EXPECT_EQ(internal::device_counts().skipped_capturing, skipped + 1);
  EXPECT_FALSE(c.span("megatron.layer.captured").is_null()) << "the host span is kept";
}

TEST_F(DeviceTiming, AnExhaustedPoolKeepsHostTimeAndCountsTheSkip) {
  testing::Capture c(device_config());
  void* stream = new_stream();
  set_device_stream(stream);
  launch(stream, 500'000);  // nothing completes for 0.5 s: every pair stays out
  const std::uint64_t skipped = internal::device_counts().skipped_pool_exhausted;
  constexpr int kSpans = internal::kPairsPerThread + 100;
  for (int i = 0; i < kSpans; ++i) {
    LENS_SPAN(mg::layer, "megatron.layer.forward");
  }
  EXPECT_EQ(internal::device_counts().skipped_pool_exhausted, skipped + 100);
  EXPECT_EQ(wait_for(c, ".device", internal::kPairsPerThread).size(), internal::kPairsPerThread);
  EXPECT_EQ(c.telemetry().span_stats().dropped(), 0u);
}

// A wedged cudaEventQuery holds up device spans only: the polls run on the CUDA driver thread, spans and metrics
// keep flowing, the call is counted and said once, and device spans come back with the driver.
TEST_F(DeviceTiming, AWedgedEventQueryHoldsUpDeviceSpansOnly) {
  testing::Capture c(device_config());
  void* stream = new_stream();
  set_device_stream(stream);
  { LENS_SPAN(mg::layer, "warm-up"); }
  ASSERT_EQ(wait_for(c, ".device", 1).size(), 1u);
  const std::uint64_t stuck_before = internal::stuck_driver_calls(internal::DriverApi::kCuda);
  auto wedge = control<void(bool)>("fake_cuda_wedge_event_query");
  const auto wedged_at = std::chrono::steady_clock::now();
  wedge(true);
  { LENS_SPAN(mg::layer, "megatron.layer.forward"); }
  // The export thread's cycles go on until the call has run past its 2 s and is counted (at most 30 s here).
  int flushes = 0;
  for (; flushes < 300 && internal::stuck_driver_calls(internal::DriverApi::kCuda) == stuck_before; ++flushes) {
    { LENS_SPAN(mg::job, "megatron.train"); }
    ASSERT_TRUE(c.telemetry().force_flush(std::chrono::seconds(10))) << "the export thread never waits on CUDA";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(std::chrono::steady_clock::now() - wedged_at, internal::kDriverCallStuckAfter) << "counted past its 2 s";
  std::size_t trains = 0;
  for (const json& s : c.spans()) trains += s["name"] == "megatron.train" ? 1 : 0;
  EXPECT_EQ(trains, static_cast<std::size_t>(flushes)) << "every span exported while CUDA was wedged";
  EXPECT_EQ(wait_for(c, ".device", 1).size(), 1u) << "the layer's device span waits for the driver";
  EXPECT_EQ(internal::stuck_driver_calls(internal::DriverApi::kCuda), stuck_before + 1);
  wedge(false);
  EXPECT_EQ(wait_for(c, ".device", 2).size(), 2u) << "and comes with it";
}

TEST_F(DeviceTiming, APairThatNeverCompletesIsDroppedAndCountedAtShutdownWithinTheDeadline) {
  testing::Capture c(device_config());
  void* stream = new_stream();
  set_device_stream(stream);
  launch(stream, 600e6);  // ten minutes: a hung kernel
  { LENS_SPAN(mg::layer, "megatron.layer.hung"); }
  const std::uint64_t dropped = internal::device_counts().dropped_incomplete;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.telemetry().shutdown(std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << "it waited about 1 s, no longer";
  EXPECT_EQ(internal::device_counts().dropped_incomplete, dropped + 1);
  EXPECT_EQ(c.exporter().spans, 1u) << "the host span only";
}

TEST_F(DeviceTiming, NvtxRangesNameTheDeviceTimedSpansInALensDomain) {
  setenv("NVTX_INJECTION64_PATH", LENS_FAKE_NVTX, 1);  // as Nsight Systems attaches itself
  internal::reset_nvtx_for_testing();
  testing::Capture c(device_config("layer"));
  set_device_stream(new_stream());
  void* nvtx = dlopen(LENS_FAKE_NVTX, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(nvtx, nullptr) << "attached by NVTX at the setup";
  auto events = reinterpret_cast<const char* (*)()>(dlsym(nvtx, "fake_nvtx_events_on_this_thread"));
  reinterpret_cast<void (*)()>(dlsym(nvtx, "fake_nvtx_clear_this_thread"))();
  {
    LENS_SPAN(mg::forward_backward, "megatron.forward_backward");  // not device-timed here: no range
    LENS_SPAN(mg::layer, "megatron.layer.forward");
    const std::string name = "megatron.layer." + std::to_string(7);  // copied: NUL-terminated for NVTX
    LENS_SPAN(mg::layer, name);
  }
  EXPECT_STREQ(events(), "push(lens:megatron.layer.forward) push(lens:megatron.layer.7) pop(lens) pop(lens) ");
  EXPECT_EQ(reinterpret_cast<int (*)()>(dlsym(nvtx, "fake_nvtx_depth_on_this_thread"))(), 0);
  EXPECT_EQ(wait_for(c, ".device", 2).size(), 2u) << "and timed on the device as before";
}

TEST_F(DeviceTiming, WithoutARuntimeSpansKeepHostTimeOnly) {
  setenv("LENS_CUDART_LIBRARY", "/nonexistent/libcudart.so.12", 1);
  internal::reset_cuda_runtime_for_testing();
  testing::Capture c(device_config());
  EXPECT_EQ(internal::device_timing_runtime(), nullptr);
  EXPECT_EQ(internal::g_device_group_bits.load(), 0u);
  { LENS_SPAN(mg::layer, "megatron.layer.forward"); }
  EXPECT_EQ(c.spans().size(), 1u);
}

TEST_F(DeviceTiming, IsOffByDefaultAndAfterShutdown) {
  {
    testing::Capture c(testing::capture_config("all"));
    EXPECT_EQ(internal::g_device_group_bits.load(), 0u);
    EXPECT_EQ(internal::device_timing_runtime(), nullptr);
  }
  {
    testing::Capture c(device_config());
    EXPECT_EQ(internal::g_device_group_bits.load(),
              (GroupSet{mg::forward_backward, mg::microbatch, mg::layer, mg::communication}.bits()));
    c.telemetry().shutdown();
    EXPECT_EQ(internal::g_device_group_bits.load(), 0u);
  }
}

}  // namespace
}  // namespace lens
