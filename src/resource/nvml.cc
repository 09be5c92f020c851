#include "resource/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace lens::internal {

namespace {

// The NVML ABI, as NVIDIA documents it (only what lens calls).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_opaque*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;  // percent
};
struct nvmlMemory_t {
  unsigned long long total, free, used;  // bytes
};
constexpr int kNvmlTemperatureGpu = 0;  // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;         // nvmlClockType_t NVML_CLOCK_SM

struct Nvml {
  void* library = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*serial)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  // The readings: optional, each (a library without one gives no such reading).
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_milliwatts)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock_mhz)(nvmlDevice_t, int, unsigned int*) = nullptr;
};

template <typename F>
bool bind(void* library, const char* symbol, F*& out) {
  out = reinterpret_cast<F*>(dlsym(library, symbol));
  return out != nullptr;
}

std::mutex g_mutex;  // guards g_loaded and g_tried
Nvml* g_loaded = nullptr;
bool g_tried = false;

// Loads NVML and initialises it, once; nullptr when anything is missing. Kept loaded for the process.
Nvml* nvml() {
  std::lock_guard lock(g_mutex);
  if (g_tried) return g_loaded;
  g_tried = true;
  g_loaded = []() -> Nvml* {
    const char* path = std::getenv("LENS_NVML_LIBRARY");
    void* library = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return nullptr;
    auto* n = new Nvml;
    n->library = library;
    bool ok = bind(library, "nvmlInit_v2", n->init) && bind(library, "nvmlShutdown", n->shutdown) &&
              bind(library, "nvmlDeviceGetCount_v2", n->device_count) &&
              bind(library, "nvmlDeviceGetHandleByIndex_v2", n->handle_by_index) &&
              bind(library, "nvmlDeviceGetName", n->name) && bind(library, "nvmlDeviceGetUUID", n->uuid) &&
              bind(library, "nvmlDeviceGetSerial", n->serial) && bind(library, "nvmlDeviceGetPciInfo_v3", n->pci_info);
    bind(library, "nvmlDeviceGetUtilizationRates", n->utilization);
    bind(library, "nvmlDeviceGetMemoryInfo", n->memory);
    bind(library, "nvmlDeviceGetPowerUsage", n->power_milliwatts);
    bind(library, "nvmlDeviceGetTemperature", n->temperature);
    bind(library, "nvmlDeviceGetClockInfo", n->clock_mhz);
    if (!ok || n->init() != kNvmlSuccess) {
      dlclose(library);
      delete n;
      return nullptr;
    }
    return n;
  }();
  return g_loaded;
}

std::optional<std::string> text(nvmlReturn_t (*get)(nvmlDevice_t, char*, unsigned int), nvmlDevice_t device) {
  char buffer[96] = {};
  if (get(device, buffer, sizeof buffer) != kNvmlSuccess) return std::nullopt;
  buffer[sizeof buffer - 1] = '\0';
  return std::string(buffer);
}

nvmlDevice_t device_at(Nvml* n, int index) {
  nvmlDevice_t device = nullptr;
  if (n == nullptr || index < 0 || n->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess)
    return nullptr;
  return device;
}

}  // namespace

void reset_nvml_for_testing() {
  std::lock_guard lock(g_mutex);
  if (g_loaded) {
    g_loaded->shutdown();
    dlclose(g_loaded->library);
    delete g_loaded;
  }
  g_loaded = nullptr;
  g_tried = false;
}

std::optional<int> nvml_device_count() {
  Nvml* n = nvml();
  unsigned int count = 0;
  if (n == nullptr || n->device_count(&count) != kNvmlSuccess) return std::nullopt;
  return static_cast<int>(count);
}

std::optional<GpuIdentity> nvml_device_identity(int index) {
  Nvml* n = nvml();
  nvmlDevice_t device = device_at(n, index);
  if (device == nullptr) return std::nullopt;
  GpuIdentity g;
  g.index = index;
  auto name = text(n->name, device), uuid = text(n->uuid, device), serial = text(n->serial, device);
  nvmlPciInfo_t pci{};
  if (!name || !uuid || n->pci_info(device, &pci) != kNvmlSuccess) return std::nullopt;
  g.name = *name;
  g.uuid = *uuid;
  g.serial = serial.value_or("");  // consumer boards have none
  pci.busId[sizeof pci.busId - 1] = '\0';
  g.pci_bus_id = pci.busId;
  return g;
}

std::optional<GpuSample> nvml_device_sample(int index) {
  Nvml* n = nvml();
  nvmlDevice_t device = device_at(n, index);
  if (device == nullptr) return std::nullopt;
  GpuSample s;
  unsigned int value = 0;
  if (nvmlUtilization_t u{}; n->utilization && n->utilization(device, &u) == kNvmlSuccess)
    s.utilization = u.gpu / 100.0;
  if (nvmlMemory_t m{}; n->memory && n->memory(device, &m) == kNvmlSuccess) {
    s.memory_used = m.used;
    s.memory_total = m.total;
  }
  if (n->power_milliwatts && n->power_milliwatts(device, &value) == kNvmlSuccess) s.power_watts = value / 1000.0;
  if (n->temperature && n->temperature(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess)
    s.temperature_celsius = value;
  if (n->clock_mhz && n->clock_mhz(device, kNvmlClockSm, &value) == kNvmlSuccess)
    s.sm_clock_hz = std::int64_t{value} * 1'000'000;
  return s;
}

}  // namespace lens::internal
