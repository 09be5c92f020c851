// The CUDA runtime found at run time (src/device/cuda_runtime.h), against the simulator built as libcudart.so.12
// (tests/support/fake_cudart.cc): loaded and bound, absent or incomplete as a reason and never an error, and the
// documented behaviour device timing relies on (events complete in stream order, elapsed time from the device's
// clock, cudaErrorNotReady before completion, capture seen).
#include "device/cuda_runtime.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>

namespace lens::internal {
namespace {

// Loads the runtime from `path` (LENS_CUDART_LIBRARY) for one test, and forgets it after.
class CudaRuntimeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("LENS_CUDART_LIBRARY");
    reset_cuda_runtime_for_testing();
  }
  static const CudaRuntime* load(const char* path, std::string* why) {
    setenv("LENS_CUDART_LIBRARY", path, 1);
    reset_cuda_runtime_for_testing();
    return cuda_runtime(why);
  }
  // One of the simulator's controls (it is loaded by now).
  template <typename F>
  static F* control(const char* name) {
    void* library = dlopen(LENS_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(library, nullptr);
    return reinterpret_cast<F*>(dlsym(library, name));
  }
};

TEST_F(CudaRuntimeTest, TheSimulatorIsLoadedAndEveryEntryPointBound) {
  std::string why;
  const CudaRuntime* cuda = load(LENS_FAKE_CUDART, &why);
  ASSERT_NE(cuda, nullptr) << why;
  EXPECT_TRUE(why.empty());
  int device = -1;
  EXPECT_EQ(cuda->get_device(&device), kCudaSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cuda_runtime(), cuda) << "loaded once, kept";
}

TEST_F(CudaRuntimeTest, NoRuntimeIsAReasonNotAnError) {
  std::string why;
  EXPECT_EQ(load("/nonexistent/libcudart.so.12", &why), nullptr);
  EXPECT_EQ(why, "no CUDA runtime: /nonexistent/libcudart.so.12 (LENS_CUDART_LIBRARY) not found");
}

TEST_F(CudaRuntimeTest, ALibraryWithoutAnEntryPointIsNotUsed) {
  std::string why;
  EXPECT_EQ(load(LENS_FAKE_NVML, &why), nullptr);  // a library, but not the CUDA runtime
  EXPECT_NE(why.find("lacks cudaEventCreateWithFlags"), std::string::npos) << why;
}

TEST_F(CudaRuntimeTest, EventsAroundAKernelGiveItsDurationOnceCompleteAndNotReadyBefore) {
  const CudaRuntime* cuda = load(LENS_FAKE_CUDART, nullptr);
  ASSERT_NE(cuda, nullptr);
  auto stream = static_cast<cudaStream_t>(control<void*()>("fake_cuda_stream_create")());
  auto* launch = control<void(void*, double)>("fake_cuda_launch_kernel");
  cudaEvent_t start = nullptr, end = nullptr;
  ASSERT_EQ(cuda->event_create_with_flags(&start, kCudaEventDefault), kCudaSuccess);
  ASSERT_EQ(cuda->event_create_with_flags(&end, kCudaEventDefault), kCudaSuccess);
  float ms = 0;
  EXPECT_EQ(cuda->event_elapsed_time(&ms, start, end), kCudaErrorInvalidResourceHandle) << "never recorded";
  launch(stream, 2000);  // the stream is busy 2 ms before the span starts
  ASSERT_EQ(cuda->event_record(start, stream), kCudaSuccess);
  launch(stream, 30000);
  ASSERT_EQ(cuda->event_record(end, stream), kCudaSuccess);
  EXPECT_EQ(cuda->event_query(end), kCudaErrorNotReady);
  EXPECT_EQ(cuda->event_elapsed_time(&ms, start, end), kCudaErrorNotReady);
  while (cuda->event_query(end) == kCudaErrorNotReady) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(cuda->event_query(start), kCudaSuccess) << "in stream order";
  ASSERT_EQ(cuda->event_elapsed_time(&ms, start, end), kCudaSuccess);
  EXPECT_NEAR(ms, 30.0, 0.3);
  EXPECT_EQ(cuda->event_destroy(start), kCudaSuccess);
  EXPECT_EQ(cuda->event_query(start), kCudaErrorInvalidResourceHandle) << "destroyed";
  EXPECT_EQ(cuda->event_destroy(end), kCudaSuccess);
}

TEST_F(CudaRuntimeTest, AStreamUnderCaptureSaysSo) {
  const CudaRuntime* cuda = load(LENS_FAKE_CUDART, nullptr);
  ASSERT_NE(cuda, nullptr);
  void* stream = control<void*()>("fake_cuda_stream_create")();
  int status = -1;
  ASSERT_EQ(cuda->stream_is_capturing(static_cast<cudaStream_t>(stream), &status), kCudaSuccess);
  EXPECT_EQ(status, kCudaStreamCaptureStatusNone);
  control<void(void*)>("fake_cuda_begin_capture")(stream);
  ASSERT_EQ(cuda->stream_is_capturing(static_cast<cudaStream_t>(stream), &status), kCudaSuccess);
  EXPECT_EQ(status, kCudaStreamCaptureStatusActive);
  control<void(void*)>("fake_cuda_end_capture")(stream);
  EXPECT_EQ(cuda->stream_is_capturing(kCudaLegacyDefaultStream, &status), kCudaSuccess);
  EXPECT_EQ(status, kCudaStreamCaptureStatusNone);
}

}  // namespace
}  // namespace lens::internal
