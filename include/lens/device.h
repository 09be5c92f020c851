// lens/device.h: the GPU stream whose time the device-timed spans measure (docs/GPU.md).
//
// With MEGATRON_OTEL_DEVICE_TIMING=cuda, a span of a group in DEVICE_SPAN_GROUPS records a CUDA event at its start and
// end on the calling thread's stream, and the export thread later emits a child span `<name>.device` with the time the
// GPU spent between them. lens cannot see which stream a framework launches on: the thread says so, once, and again
// whenever it changes streams (PyTorch: `lens.set_device_stream(torch.cuda.current_stream())`).
//
//   cudaStream_t stream = ...;                   // the stream this thread's kernels go to
//   lens::set_device_stream(stream);
//   { LENS_SPAN(lens::group::forward_backward, "forward_backward"); launch_kernels(stream); }
//
// Unset (or null): the legacy default stream. With LENS_DISABLED it is an inline no-op.
#pragma once

#include "lens/internal/visibility.h"

namespace lens {

#if !defined(LENS_DISABLED)
// Sets the calling thread's stream (a cudaStream_t) for the device-timed spans it starts from now on, and takes the
// thread's current device (cudaGetDevice) as theirs. Costs nothing while device timing is off.
LENS_API void set_device_stream(void* stream) noexcept;
// The calling thread's stream as set, null for the legacy default stream.
LENS_API void* device_stream() noexcept;
#else
inline void set_device_stream(void*) noexcept {}
inline void* device_stream() noexcept { return nullptr; }
#endif

}  // namespace lens
