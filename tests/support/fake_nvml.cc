// A stand-in for libnvidia-ml.so.1, so the NVML code path (dlopen included) runs without a GPU. Four devices.
// FAKE_NVML_FAIL=init|device makes that call fail; built twice, once without nvmlDeviceGetPciInfo_v3 (a library
// that lacks a symbol). fake_nvml_calls counts every entry, so a test can prove NVML was never touched.
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

int fake_nvml_calls = 0;

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
}
