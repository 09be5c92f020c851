// NVTX, found at run time: when libnvToolsExt.so.1 is loadable (the CUDA toolkit and PyTorch's CUDA wheels
// bring it), the spans of the device-timed groups also push and pop an NVTX range named after the span in a domain
// `lens`, so Nsight Systems shows lens's names on its timeline. Three entry points, declared from NVIDIA's NVTX
// documentation (nvToolsExt.h, version 2 attributes):
//
//   nvtxDomainCreateA  nvtxDomainRangePushEx  nvtxDomainRangePop
//
//   if (const lens::internal::Nvtx* nvtx = lens::internal::nvtx()) nvtx->push("megatron.layer.forward");
//
// Absent (no library, or one that lacks an entry point): nullptr, and no range is pushed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lens::internal {

struct Nvtx {
  using Domain = struct nvtxDomainRegistration_st*;
  // nvtxEventAttributes_t, version 2, as documented: only the message (an ASCII name) is set.
  struct EventAttributes {
    std::uint16_t version = 2;
    std::uint16_t size = sizeof(EventAttributes);
    std::uint32_t category = 0;
    std::int32_t color_type = 0;  // NVTX_COLOR_UNKNOWN
    std::uint32_t color = 0;
    std::int32_t payload_type = 0;  // NVTX_PAYLOAD_UNKNOWN
    std::int32_t reserved0 = 0;
    std::uint64_t payload = 0;
    std::int32_t message_type = 1;  // NVTX_MESSAGE_TYPE_ASCII
    const char* message = nullptr;
  };
  static_assert(sizeof(EventAttributes) == 48);

  std::string library;
  Domain domain = nullptr;  // `lens`
  Domain (*domain_create)(const char* name) = nullptr;
  int (*range_push)(Domain domain, const EventAttributes* attributes) = nullptr;
  int (*range_pop)(Domain domain) = nullptr;

  // Pushes a range named `name` (copied to a NUL-terminated buffer when it is not one already) on the calling
  // thread's NVTX stack.
  void push(std::string_view name, bool nul_terminated) const noexcept;
  void pop() const noexcept { range_pop(domain); }
};

// libnvToolsExt.so.1 (LENS_NVTX_LIBRARY, a path, replaces it), loaded on the first call and kept for the process;
// nullptr when none could be loaded, the reason in `why` when given. Thread-safe.
const Nvtx* nvtx(std::string* why = nullptr);

// Forgets the loaded library, so a test can load another in the same process.
void reset_nvtx_for_testing();

}  // namespace lens::internal
