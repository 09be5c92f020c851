// The CUDA runtime, found at run time: lens builds with no CUDA header, toolkit or GPU, and loads
// libcudart.so.12 (then libcudart.so.11) with dlopen when device timing is asked for. The few entry points device
// timing calls are declared here from NVIDIA's CUDA Runtime API documentation (Event and Stream Management):
//
//   cudaEventCreateWithFlags  cudaEventDestroy  cudaEventRecord  cudaEventQuery  cudaEventElapsedTime
//   cudaStreamIsCapturing     cudaGetDevice     cudaSetDevice    cudaStreamCreateWithFlags
//   cudaThreadExchangeStreamCaptureMode
//
// Absent (no library, or one that lacks an entry point): nullptr and the reason, for a warning; never an error.
//
//   std::string why;
//   if (const lens::internal::CudaRuntime* cuda = lens::internal::cuda_runtime(&why)) {
//     lens::internal::cudaEvent_t e = nullptr;
//     cuda->event_create_with_flags(&e, lens::internal::kCudaEventDefault);
//   }
#pragma once

#include <string>

namespace lens::internal {

// The runtime's handles and codes, as documented (cuda_runtime_api.h / driver_types.h).
using cudaError_t = int;
using cudaEvent_t = struct CUevent_st*;
using cudaStream_t = struct CUstream_st*;
inline constexpr cudaError_t kCudaSuccess = 0;
inline constexpr cudaError_t kCudaErrorInvalidResourceHandle = 400;
inline constexpr cudaError_t kCudaErrorNotReady = 600;
// An operation a thread may not make while a stream captures in global mode (cudaErrorStreamCaptureUnsupported).
inline constexpr cudaError_t kCudaErrorStreamCaptureUnsupported = 900;
inline constexpr unsigned kCudaEventDefault = 0;  // timing on (cudaEventDisableTiming would turn it off)
// cudaStreamCaptureStatus.
inline constexpr int kCudaStreamCaptureStatusNone = 0;
inline constexpr int kCudaStreamCaptureStatusActive = 1;
inline constexpr int kCudaStreamCaptureStatusInvalidated = 2;
// cudaStreamCaptureMode: relaxed lets a thread query events while another thread captures.
inline constexpr int kCudaStreamCaptureModeRelaxed = 2;
inline constexpr unsigned kCudaStreamNonBlocking = 1;  // a stream that does not wait for the legacy default one
// The legacy default stream (a null handle): what an unset stream records on.
inline const cudaStream_t kCudaLegacyDefaultStream = nullptr;

struct CudaRuntime {
  std::string library;  // the name it was loaded by
  cudaError_t (*event_create_with_flags)(cudaEvent_t* event, unsigned flags) = nullptr;
  cudaError_t (*event_destroy)(cudaEvent_t event) = nullptr;
  cudaError_t (*event_record)(cudaEvent_t event, cudaStream_t stream) = nullptr;
  cudaError_t (*event_query)(cudaEvent_t event) = nullptr;
  cudaError_t (*event_elapsed_time)(float* ms, cudaEvent_t start, cudaEvent_t end) = nullptr;
  cudaError_t (*stream_is_capturing)(cudaStream_t stream, int* capture_status) = nullptr;
  cudaError_t (*get_device)(int* device) = nullptr;
  cudaError_t (*set_device)(int device) = nullptr;
  cudaError_t (*stream_create_with_flags)(cudaStream_t* stream, unsigned flags) = nullptr;
  cudaError_t (*thread_exchange_stream_capture_mode)(int* mode) = nullptr;
};

// The libraries tried, in order (LENS_CUDART_LIBRARY, a path, replaces them: tests point it at a simulator or at a
// library that does not exist).
inline constexpr const char* kCudaRuntimeLibraries[] = {"libcudart.so.12", "libcudart.so.11"};

// The runtime, loaded on the first call and kept for the process; nullptr when none could be loaded, with the
// reason in `why` when given. Thread-safe.
const CudaRuntime* cuda_runtime(std::string* why = nullptr);

// Forgets the loaded runtime, so a test can load another (LENS_CUDART_LIBRARY) in the same process.
void reset_cuda_runtime_for_testing();

}  // namespace lens::internal
