#include "simulated_gpu.h"

#include <dlfcn.h>

#include <stdexcept>

#include "lens/device.h"

namespace trainer {

namespace {

struct Simulator {
  void* stream = nullptr;
  void (*launch)(void* stream, double microseconds) = nullptr;
  double kernel_us = 0;
};
Simulator g_gpu;  // set once before training starts, read by the training thread only

}  // namespace

void SimulatedGpu::open(const std::string& path, double kernel_us) {
  if (path.empty()) return;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // the library lens loads by the same path: one device
  auto* create = library ? reinterpret_cast<void* (*)()>(dlsym(library, "fake_cuda_stream_create")) : nullptr;
  auto* launch =
      library ? reinterpret_cast<void (*)(void*, double)>(dlsym(library, "fake_cuda_launch_kernel")) : nullptr;
  if (create == nullptr || launch == nullptr)
    throw std::runtime_error("--testing-fake-cuda " + path + ": not the CUDA runtime's simulator (" +
                             (library ? "no fake_cuda_* controls" : std::string(dlerror())) + ")");
  g_gpu = {create(), launch, kernel_us};
  lens::set_device_stream(g_gpu.stream);
}

void SimulatedGpu::kernel() {
  if (g_gpu.launch != nullptr) g_gpu.launch(g_gpu.stream, g_gpu.kernel_us);
}

}  // namespace trainer
