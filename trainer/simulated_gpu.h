// Testing aid (not Megatron's): the trainer's "GPU" when `--testing-fake-cuda PATH` names the CUDA runtime's simulator
// (tests/support/fake_cudart.cc, built as libcudart.so.12): each layer's attention and MLP also queue a simulated
// kernel of `--testing-kernel-us` on one stream of it, which the training thread tells lens (lens::set_device_stream),
// so a run with MEGATRON_OTEL_DEVICE_TIMING=cuda and LENS_CUDART_LIBRARY=PATH has device spans to check. The CPU work
// is unchanged: the kernels run beside it, asynchronously, as a GPU's would.
//
//   SimulatedGpu::open(args.testing_fake_cuda, args.testing_kernel_us);  // once, on the training thread
//   SimulatedGpu::kernel();                                                // in a layer: no-op without
//   --testing-fake-cuda
#pragma once

#include <string>

namespace trainer {

class SimulatedGpu {
 public:
  // Loads the simulator, makes a stream, sets it as the calling thread's device stream. Throws std::runtime_error
  // naming the path when the library or its controls cannot be found. An empty path: nothing (kernel() is a no-op).
  static void open(const std::string& path, double kernel_us);
  // Queues one kernel on the stream (nothing without open()).
  static void kernel();
};

}  // namespace trainer
