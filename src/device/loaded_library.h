// A library found at run time (dlopen) as a table of entry points, loaded on first use and kept for the process: the
// CUDA runtime (cuda_runtime.h) and NVTX (nvtx.h) alike. Absent: nullptr and the reason. Thread-safe.
//
//   LoadedLibrary<CudaRuntime> g_cuda(load_cuda_runtime);   // load_cuda_runtime() -> {table or null, why}
//   const CudaRuntime* cuda = g_cuda.get(&why);
#pragma once

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lens::internal {

// Binds `symbol` of `library` to `out`; false when the library lacks it.
template <typename F>
bool bind_symbol(void* library, const char* symbol, F*& out) {
  out = reinterpret_cast<F*>(dlsym(library, symbol));
  return out != nullptr;
}

template <typename Table>
class LoadedLibrary {
 public:
  struct Loaded {
    std::unique_ptr<Table> table;
    std::string why;  // when table is null
  };
  explicit LoadedLibrary(Loaded (*load)()) : load_(load) {}

  const Table* get(std::string* why) {
    std::lock_guard lock(mutex_);
    if (!tried_) {
      loaded_ = load_();
      tried_ = true;
    }
    if (why != nullptr) *why = loaded_.why;
    return loaded_.table.get();
  }

  // Forgets the loaded table, so a test can load another in the same process; the old one stays valid for anyone
  // still holding it.
  void reset_for_testing() {
    std::lock_guard lock(mutex_);
    if (loaded_.table != nullptr) retired_.push_back(std::move(loaded_.table));
    loaded_ = {};
    tried_ = false;
  }

 private:
  Loaded (*const load_)();
  std::mutex mutex_;  // guards everything below
  Loaded loaded_;
  bool tried_ = false;
  std::vector<std::unique_ptr<Table>> retired_;
};

}  // namespace lens::internal
