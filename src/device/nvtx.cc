#include "device/nvtx.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

struct Loaded {
  std::unique_ptr<Nvtx> nvtx;
  std::string why;
};

Loaded load() {
  const char* override_path = std::getenv("LENS_NVTX_LIBRARY");
  const std::string name = override_path != nullptr && *override_path != '\0' ? override_path : "libnvToolsExt.so.1";
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return {nullptr, "no NVTX: " + name + " not found"};
  auto n = std::make_unique<Nvtx>();
  n->library = name;
  for (auto [symbol, ok] : {std::pair{"nvtxDomainCreateA", bind(library, "nvtxDomainCreateA", n->domain_create)},
                            {"nvtxDomainRangePushEx", bind(library, "nvtxDomainRangePushEx", n->range_push)},
                            {"nvtxDomainRangePop", bind(library, "nvtxDomainRangePop", n->range_pop)}})
    if (!ok) return {nullptr, name + " lacks " + symbol};  // kept open, as the CUDA runtime
  n->domain = n->domain_create("lens");
  return {std::move(n), {}};
}

std::mutex g_mutex;  // guards g_loaded and g_tried
Loaded g_loaded;
bool g_tried = false;

}  // namespace

void Nvtx::push(std::string_view name, bool nul_terminated) const noexcept {
  EventAttributes a;
  if (nul_terminated) {
    a.message = name.data();
  } else {
    thread_local char buffer[128];  // a copied span name, cut to the buffer
    const std::size_t n = std::min(name.size(), sizeof buffer - 1);
    std::memcpy(buffer, name.data(), n);
    buffer[n] = '\0';
    a.message = buffer;
  }
  range_push(domain, &a);
}

const Nvtx* nvtx(std::string* why) {
  std::lock_guard lock(g_mutex);
  if (!g_tried) {
    g_loaded = load();
    g_tried = true;
  }
  if (why != nullptr) *why = g_loaded.why;
  return g_loaded.nvtx.get();
}

void reset_nvtx_for_testing() {
  std::lock_guard lock(g_mutex);
  static std::vector<std::unique_ptr<Nvtx>> retired;  // still valid for anyone holding it
  if (g_loaded.nvtx != nullptr) retired.push_back(std::move(g_loaded.nvtx));
  g_loaded = {};
  g_tried = false;
}

}  // namespace lens::internal
