#include "device/nvtx.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "device/loaded_library.h"

namespace lens::internal {

namespace {

using Loaded = LoadedLibrary<Nvtx>::Loaded;

Loaded load() {
  const char* override_path = std::getenv("LENS_NVTX_LIBRARY");
  const std::string name = override_path != nullptr && *override_path != '\0' ? override_path : "libnvToolsExt.so.1";
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return {nullptr, "no NVTX: " + name + " not found"};
  auto n = std::make_unique<Nvtx>();
  n->library = name;
  for (auto [symbol, ok] : {std::pair{"nvtxDomainCreateA", bind_symbol(library, "nvtxDomainCreateA", n->domain_create)},
                            {"nvtxDomainRangePushEx", bind_symbol(library, "nvtxDomainRangePushEx", n->range_push)},
                            {"nvtxDomainRangePop", bind_symbol(library, "nvtxDomainRangePop", n->range_pop)}})
    if (!ok) return {nullptr, name + " lacks " + symbol};  // kept open, as the CUDA runtime
  n->domain = n->domain_create("lens");
  return {std::move(n), {}};
}

LoadedLibrary<Nvtx>& loaded() {
  static auto* library = new LoadedLibrary<Nvtx>(load);  // never destroyed: threads may still hold the table
  return *library;
}

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

const Nvtx* nvtx(std::string* why) { return loaded().get(why); }

void reset_nvtx_for_testing() { loaded().reset_for_testing(); }

}  // namespace lens::internal
