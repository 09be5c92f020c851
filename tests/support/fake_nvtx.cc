// A stand-in NVTX tool, attached as Nsight Systems attaches itself (NVTX_INJECTION64_PATH names it; NVTX v3 in lens
// loads it and calls its InitializeInjectionNvtx2), so lens's NVTX ranges run without Nsight: the three calls lens
// makes, with NVTX's documented behaviour (a domain by name, a push/pop stack per thread), and what each thread pushed
// and popped kept for the test to read (fake_nvtx_events_on_this_thread). Built a second time with FAKE_NVTX_NOOP
// (libfake_nvtx_noop.so) for the benchmark: the stack's depth only, as a tool that records little does.
#define NVTX_NO_IMPL  // a tool: NVTX's types and ids, not its implementation
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;
std::map<std::string, int>& g_domains = *new std::map<std::string, int>;  // name -> handle (1-based)
std::map<int, std::string>& g_names = *new std::map<int, std::string>;    // handle -> name

std::string name_of(nvtxDomainHandle_t domain) {
  std::lock_guard lock(g_mutex);
  const auto it = g_names.find(static_cast<int>(reinterpret_cast<std::intptr_t>(domain)));
  return it == g_names.end() ? "?" : it->second;
}
thread_local std::string t_events;  // "push(domain:name) pop(domain) ..." of this thread
thread_local int t_depth = 0;

nvtxDomainHandle_t domain_create(const char* name) {
  std::lock_guard lock(g_mutex);
  auto [it, fresh] = g_domains.emplace(name, static_cast<int>(g_domains.size()) + 1);
  g_names[it->second] = name;
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<std::intptr_t>(it->second));
}

int range_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  if (a == nullptr || a->size != NVTX_EVENT_ATTRIB_STRUCT_SIZE || a->messageType != NVTX_MESSAGE_TYPE_ASCII) return -1;
#if !defined(FAKE_NVTX_NOOP)
  t_events += "push(" + name_of(domain) + ":" + a->message.ascii + ") ";
#else
  (void)domain;
#endif
  return t_depth++;
}

int range_pop(nvtxDomainHandle_t domain) {
  if (t_depth == 0) return -1;
#if !defined(FAKE_NVTX_NOOP)
  t_events += "pop(" + name_of(domain) + ") ";
#else
  (void)domain;
#endif
  return --t_depth;
}

// Puts `function` in slot `id` of NVTX's table for `module`.
template <typename F>
bool install(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module, unsigned id, F* function) {
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks->GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr || id >= size) return false;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(function);
  return true;
}

}  // namespace

extern "C" {

// NVTX's injection entry point: 1 when the tool attached.
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  return install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, &domain_create) &&
                 install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, &range_push) &&
                 install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, &range_pop)
             ? 1
             : 0;
}

// ---- the test's controls ----
__attribute__((visibility("default"))) const char* fake_nvtx_events_on_this_thread() { return t_events.c_str(); }
__attribute__((visibility("default"))) void fake_nvtx_clear_this_thread() { t_events.clear(); }
__attribute__((visibility("default"))) int fake_nvtx_depth_on_this_thread() { return t_depth; }

}  // extern "C"
