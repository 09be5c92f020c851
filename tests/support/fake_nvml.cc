// A stand-in for libnvidia-ml.so.1, so the NVML code path (dlopen included) runs without a GPU. Four devices.
// Readings: device i is 80+i % busy, uses (40+i) GiB of 141 GiB, draws 512.5 W at 61 C with its SM clock at 1980 MHz.
// FAKE_NVML_FAIL=init|device|power makes that call fail; FAKE_NVML_READINGS=out_of_range makes every reading one no
// GPU gives (NVML's unsigned garbage); after fake_nvml_wedge(true), nvmlDeviceGetUtilizationRates does not return until
// fake_nvml_wedge(false) (a wedged driver); built twice, once without nvmlDeviceGetPciInfo_v3 (a library
// that lacks a symbol). fake_nvml_calls counts every entry, so a test can prove NVML was never touched.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

extern "C" {

int fake_nvml_calls = 0;
std::atomic<bool> g_wedged{false};
void fake_nvml_wedge(bool wedged) { g_wedged.store(wedged); }

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

static bool failing(const char* what) {
  const char* f = std::getenv("FAKE_NVML_FAIL");
  return f != nullptr && std::strcmp(f, what) == 0;
}

int nvmlInit_v2() {
  ++fake_nvml_calls;
  return failing("init") ? 1 : 0;
}
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  ++fake_nvml_calls;
  *count = 4;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  ++fake_nvml_calls;
  if (failing("device") || index >= 4) return 2;
  *device = reinterpret_cast<void*>(static_cast<std::size_t>(index) + 1);
  return 0;
}
static bool out_of_range() {
  const char* r = std::getenv("FAKE_NVML_READINGS");
  return r != nullptr && std::strcmp(r, "out_of_range") == 0;
}
constexpr unsigned kGarbage = 0xFFFFFFFFu;
static unsigned index_of(void* device) { return static_cast<unsigned>(reinterpret_cast<std::size_t>(device) - 1); }
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  std::snprintf(name, length, "NVIDIA H200");
  return 0;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  std::snprintf(uuid, length, "GPU-00000000-1111-2222-3333-00000000000%u", index_of(device));
  return 0;
}
int nvmlDeviceGetSerial(void* device, char* serial, unsigned int length) {
  std::snprintf(serial, length, "165002300%u", index_of(device));
  return 0;
}
#if !defined(FAKE_NVML_NO_PCI)
int nvmlDeviceGetPciInfo_v3(void* device, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", 0x18 + index_of(device));
  return 0;
}
#endif

struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* u) {
  while (g_wedged.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  u->gpu = out_of_range() ? kGarbage : 80 + index_of(device);
  u->memory = 30;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* m) {
  constexpr unsigned long long kGiB = 1ull << 30;
  m->total = 141 * kGiB;
  m->used = (40 + index_of(device)) * kGiB;
  m->free = m->total - m->used;
  if (out_of_range()) m->used = 2 * m->total;
  return 0;
}
int nvmlDeviceGetPowerUsage(void*, unsigned int* milliwatts) {
  if (failing("power")) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *milliwatts = out_of_range() ? kGarbage : 512500;
  return 0;
}
int nvmlDeviceGetTemperature(void*, int sensor, unsigned int* celsius) {
  if (sensor != 0) return 2;
  *celsius = out_of_range() ? kGarbage : 61;
  return 0;
}
int nvmlDeviceGetClockInfo(void*, int type, unsigned int* mhz) {
  if (type != 1) return 2;  // only the SM clock is modelled
  *mhz = out_of_range() ? kGarbage : 1980;
  return 0;
}
}
