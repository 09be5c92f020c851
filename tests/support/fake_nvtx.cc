// A stand-in for libnvToolsExt.so.1, so lens's NVTX ranges run without the CUDA toolkit: the three
// entry points lens binds, with NVTX's documented behaviour (a domain by name, a push/pop stack per thread), and what
// each thread pushed and popped kept for the test to read (fake_nvtx_events_on_this_thread). Built a second time with
// FAKE_NVTX_NOOP (libfake_nvtx_noop.so) for the benchmark: the stack's depth only, as NVIDIA's library with no tool
// attached does next to nothing.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace {

struct Attributes {  // nvtxEventAttributes_t, version 2
  std::uint16_t version, size;
  std::uint32_t category;
  std::int32_t color_type;
  std::uint32_t color;
  std::int32_t payload_type, reserved0;
  std::uint64_t payload;
  std::int32_t message_type;
  const char* message;
};

std::mutex g_mutex;
std::map<std::string, int>& g_domains = *new std::map<std::string, int>;  // name -> handle (1-based)
std::map<int, std::string>& g_names = *new std::map<int, std::string>;    // handle -> name

std::string name_of(void* domain) {
  std::lock_guard lock(g_mutex);
  const auto it = g_names.find(static_cast<int>(reinterpret_cast<std::intptr_t>(domain)));
  return it == g_names.end() ? "?" : it->second;
}
thread_local std::string t_events;  // "push(domain:name) pop(domain) ..." of this thread
thread_local int t_depth = 0;

}  // namespace

extern "C" {

void* nvtxDomainCreateA(const char* name) {
  std::lock_guard lock(g_mutex);
  auto [it, fresh] = g_domains.emplace(name, static_cast<int>(g_domains.size()) + 1);
  g_names[it->second] = name;
  return reinterpret_cast<void*>(static_cast<std::intptr_t>(it->second));
}

int nvtxDomainRangePushEx(void* domain, const Attributes* a) {
  if (a == nullptr || a->version != 2 || a->size != sizeof(Attributes) || a->message_type != 1) return -1;
#if !defined(FAKE_NVTX_NOOP)
  t_events += "push(" + name_of(domain) + ":" + a->message + ") ";
#else
  (void)domain;
#endif
  return t_depth++;
}

int nvtxDomainRangePop(void* domain) {
  if (t_depth == 0) return -1;
#if !defined(FAKE_NVTX_NOOP)
  t_events += "pop(" + name_of(domain) + ") ";
#else
  (void)domain;
#endif
  return --t_depth;
}

// ---- the test's controls ----
const char* fake_nvtx_events_on_this_thread() { return t_events.c_str(); }
void fake_nvtx_clear_this_thread() { t_events.clear(); }
int fake_nvtx_depth_on_this_thread() { return t_depth; }

}  // extern "C"
