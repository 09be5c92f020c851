// NVTX v3 (NVIDIA's header-only API, compiled in from its nvidia-nvtx wheel: cmake/nvtx-requirements.txt): when a
// tool is attached, as Nsight Systems attaches itself through NVTX_INJECTION64_PATH, the spans of the device-timed
// groups also push and pop an NVTX range named after the span in a domain `lens`, so the tool shows lens's names on
// its timeline. NVTX v3 works with every CUDA version: no libnvToolsExt.so.1 (which CUDA 12.9 and later no longer
// ship) is needed.
//
//   if (const lens::internal::Nvtx* nvtx = lens::internal::nvtx()) nvtx->push("megatron.layer.forward", true);
//
// No tool attached, or one that did not load: nullptr, the reason in `why`, and no NVTX call is made.
#pragma once

#include <string>
#include <string_view>

struct nvtxDomainRegistration_st;  // NVTX's own, at global scope (nvtx3/nvToolsExt.h)

namespace lens::internal {

struct Nvtx {
  using Domain = ::nvtxDomainRegistration_st*;  // nvtxDomainHandle_t

  std::string tool;         // NVTX_INJECTION64_PATH
  Domain domain = nullptr;  // `lens`

  // Pushes a range named `name` (copied to a NUL-terminated buffer when it is not one already) on the calling
  // thread's NVTX stack.
  void push(std::string_view name, bool nul_terminated) const noexcept;
  void pop() const noexcept;
};

// The attached NVTX tool with lens's domain, looked for on the first call and kept for the process; nullptr when
// NVTX_INJECTION64_PATH names none or the tool did not load (NVTX v3 then makes every call a no-op), the reason in
// `why` when given. Thread-safe.
const Nvtx* nvtx(std::string* why = nullptr);

// Forgets what was found, so a test can look again in the same process (NVTX v3 itself attaches its tool once).
void reset_nvtx_for_testing();

}  // namespace lens::internal
