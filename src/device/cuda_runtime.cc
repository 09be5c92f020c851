#include "device/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace lens::internal {

namespace {

template <typename F>
bool bind(void* library, const char* symbol, F*& out) {
  out = reinterpret_cast<F*>(dlsym(library, symbol));
  return out != nullptr;
}

// Every entry point, or the first one missing.
const char* bind_all(void* library, CudaRuntime& r) {
  if (!bind(library, "cudaEventCreateWithFlags", r.event_create_with_flags)) return "cudaEventCreateWithFlags";
  if (!bind(library, "cudaEventDestroy", r.event_destroy)) return "cudaEventDestroy";
  if (!bind(library, "cudaEventRecord", r.event_record)) return "cudaEventRecord";
  if (!bind(library, "cudaEventQuery", r.event_query)) return "cudaEventQuery";
  if (!bind(library, "cudaEventElapsedTime", r.event_elapsed_time)) return "cudaEventElapsedTime";
  if (!bind(library, "cudaStreamIsCapturing", r.stream_is_capturing)) return "cudaStreamIsCapturing";
  if (!bind(library, "cudaGetDevice", r.get_device)) return "cudaGetDevice";
  if (!bind(library, "cudaSetDevice", r.set_device)) return "cudaSetDevice";
  if (!bind(library, "cudaStreamCreateWithFlags", r.stream_create_with_flags)) return "cudaStreamCreateWithFlags";
  if (!bind(library, "cudaThreadExchangeStreamCaptureMode", r.thread_exchange_stream_capture_mode))
    return "cudaThreadExchangeStreamCaptureMode";
  return nullptr;
}

struct Loaded {
  std::unique_ptr<CudaRuntime> runtime;
  std::string why;  // when runtime is null
};

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
    if (one.runtime == nullptr && one.why.empty())
      one.why = "no CUDA runtime: " + tried + " (LENS_CUDART_LIBRARY) not found";
    return one;
  }
  for (const char* name : kCudaRuntimeLibraries) {
    Loaded one = try_one(name);
    if (one.runtime != nullptr || !one.why.empty()) return one;
  }
  return {nullptr, "no CUDA runtime: " + tried + " not found"};
}

std::mutex g_mutex;  // guards g_loaded and g_tried
Loaded g_loaded;
bool g_tried = false;

}  // namespace

const CudaRuntime* cuda_runtime(std::string* why) {
  std::lock_guard lock(g_mutex);
  if (!g_tried) {
    g_loaded = load();
    g_tried = true;
  }
  if (why != nullptr) *why = g_loaded.why;
  return g_loaded.runtime.get();
}

void reset_cuda_runtime_for_testing() {
  std::lock_guard lock(g_mutex);
  // The old table stays valid for anyone still holding it: a test's pointer outlives the reset.
  static std::vector<std::unique_ptr<CudaRuntime>> retired;
  if (g_loaded.runtime != nullptr) retired.push_back(std::move(g_loaded.runtime));
  g_loaded = {};
  g_tried = false;
}

}  // namespace lens::internal
