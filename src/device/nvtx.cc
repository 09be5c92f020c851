#include "device/nvtx.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "device/loaded_library.h"

namespace lens::internal {

namespace {

static_assert(std::is_same_v<Nvtx::Domain, nvtxDomainHandle_t>);

using Loaded = LoadedLibrary<Nvtx>::Loaded;

Loaded load() {
  const char* tool = std::getenv("NVTX_INJECTION64_PATH");
  if (tool == nullptr || *tool == '\0') return {nullptr, "no NVTX tool attached (NVTX_INJECTION64_PATH is unset)"};
  auto n = std::make_unique<Nvtx>();
  n->tool = tool;
  // NVTX v3 attaches the tool on its first call; with none attached every call returns without doing anything.
  n->domain = nvtxDomainCreateA("lens");
  if (n->domain == nullptr) return {nullptr, "the NVTX tool NVTX_INJECTION64_PATH=" + n->tool + " did not attach"};
  return {std::move(n), {}};
}

LoadedLibrary<Nvtx>& loaded() {
  static auto* library = new LoadedLibrary<Nvtx>(load);  // never destroyed: threads may still hold the table
  return *library;
}

}  // namespace

void Nvtx::push(std::string_view name, bool nul_terminated) const noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  if (nul_terminated) {
    a.message.ascii = name.data();
  } else {
    thread_local char buffer[128];  // a copied span name, cut to the buffer
    const std::size_t n = std::min(name.size(), sizeof buffer - 1);
    std::memcpy(buffer, name.data(), n);
    buffer[n] = '\0';
    a.message.ascii = buffer;
  }
  nvtxDomainRangePushEx(domain, &a);
}

void Nvtx::pop() const noexcept { nvtxDomainRangePop(domain); }

const Nvtx* nvtx(std::string* why) { return loaded().get(why); }

void reset_nvtx_for_testing() { loaded().reset_for_testing(); }

}  // namespace lens::internal
