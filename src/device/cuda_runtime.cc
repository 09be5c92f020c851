#include "device/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "device/loaded_library.h"

namespace lens::internal {

namespace {

// Every entry point, or the first one missing.
const char* bind_all(void* library, CudaRuntime& r) {
  if (!bind_symbol(library, "cudaEventCreateWithFlags", r.event_create_with_flags)) return "cudaEventCreateWithFlags";
  if (!bind_symbol(library, "cudaEventDestroy", r.event_destroy)) return "cudaEventDestroy";
  if (!bind_symbol(library, "cudaEventRecord", r.event_record)) return "cudaEventRecord";
  if (!bind_symbol(library, "cudaEventQuery", r.event_query)) return "cudaEventQuery";
  if (!bind_symbol(library, "cudaEventElapsedTime", r.event_elapsed_time)) return "cudaEventElapsedTime";
  if (!bind_symbol(library, "cudaStreamIsCapturing", r.stream_is_capturing)) return "cudaStreamIsCapturing";
  if (!bind_symbol(library, "cudaGetDevice", r.get_device)) return "cudaGetDevice";
  if (!bind_symbol(library, "cudaSetDevice", r.set_device)) return "cudaSetDevice";
  if (!bind_symbol(library, "cudaStreamCreateWithFlags", r.stream_create_with_flags))
    return "cudaStreamCreateWithFlags";
  if (!bind_symbol(library, "cudaThreadExchangeStreamCaptureMode", r.thread_exchange_stream_capture_mode))
    return "cudaThreadExchangeStreamCaptureMode";
  return nullptr;
}

using Loaded = LoadedLibrary<CudaRuntime>::Loaded;

Loaded load() {
  const char* override_path = std::getenv("LENS_CUDART_LIBRARY");
  std::string tried;
  auto try_one = [&](const char* name) -> Loaded {
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      tried += (tried.empty() ? "" : ", ") + std::string(name);
      return {};
    }
    auto runtime = std::make_unique<CudaRuntime>();
    runtime->library = name;
    if (const char* missing = bind_all(library, *runtime)) {
      // Kept open: a library a process loaded is not unloaded under threads it may have started.
      return {nullptr, std::string(name) + " lacks " + missing};
    }
    return {std::move(runtime), {}};
  };
  if (override_path != nullptr && *override_path != '\0') {
    Loaded one = try_one(override_path);
    if (one.table == nullptr && one.why.empty())
      one.why = "no CUDA runtime: " + tried + " (LENS_CUDART_LIBRARY) not found";
    return one;
  }
  for (const char* name : kCudaRuntimeLibraries) {
    Loaded one = try_one(name);
    if (one.table != nullptr || !one.why.empty()) return one;
  }
  return {nullptr, "no CUDA runtime: " + tried + " not found"};
}

LoadedLibrary<CudaRuntime>& loaded() {
  static auto* library = new LoadedLibrary<CudaRuntime>(load);  // never destroyed: threads may still hold the table
  return *library;
}

}  // namespace

const CudaRuntime* cuda_runtime(std::string* why) { return loaded().get(why); }

void reset_cuda_runtime_for_testing() { loaded().reset_for_testing(); }

}  // namespace lens::internal
