"""Device time from Python (docs/GPU.md): with DEVICE_TIMING=cuda, a span of a device-timed group opened from Python
records CUDA events on the stream lens.set_device_stream names, and the run holds a `<name>.device` child with the
time the (simulated) GPU spent. The simulator is the CUDA runtime's (tests/support/fake_cudart.cc), loaded here
through ctypes to make streams and "kernels", and by lens through LENS_CUDART_LIBRARY: one library, one device."""

import ctypes
import os
import subprocess
import sys
import textwrap
import unittest

import lens
from lens.helpers import managed_span
from lens.megatron import MegatronSpanGroup
from support import Run, attributes

FAKE_CUDART = os.path.join(os.environ.get("LENS_BUILD_DIR", ""), "tests", "fake_cuda", "libcudart.so.12")


def simulator():
    assert os.path.exists(FAKE_CUDART), f"the simulator is built with the tests: {FAKE_CUDART}"
    fake = ctypes.CDLL(FAKE_CUDART)
    fake.fake_cuda_stream_create.restype = ctypes.c_void_p
    fake.fake_cuda_launch_kernel.argtypes = [ctypes.c_void_p, ctypes.c_double]
    return fake


def duration_ms(span):
    return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6


class TorchLikeStream:
    """What lens reads of a torch.cuda.Stream: its raw handle."""

    def __init__(self, handle):
        self.cuda_stream = handle


class DeviceSpans(unittest.TestCase):
    def tearDown(self):
        lens.set_device_stream(None)

    def run_with_device_timing(self, **env):
        return Run("all", MegatronSpanGroup, NEMO_LENS_DEVICE_TIMING="cuda", LENS_CUDART_LIBRARY=FAKE_CUDART, **env)

    def test_a_layer_span_gets_the_device_time_of_its_kernels(self):
        fake = simulator()
        stream = fake.fake_cuda_stream_create()
        with self.run_with_device_timing() as run:
            lens.set_device_stream(TorchLikeStream(stream))
            self.assertEqual(lens.device_stream(), stream)
            # The stream is busy 30 ms when the span starts, so its kernel is queued before the stream reaches the
            # span's start event: the device time is the kernel's alone, whenever this thread gets to launch it (on an
            # idle stream, a preempted thread would add the time between the start event and the launch).
            fake.fake_cuda_launch_kernel(stream, 30000.0)
            with managed_span(MegatronSpanGroup.LAYER, "megatron.layer.forward"):
                fake.fake_cuda_launch_kernel(stream, 15000.0)
        host = run.span("megatron.layer.forward")
        device = run.span("megatron.layer.forward.device")
        self.assertEqual(device["parentSpanId"], host["spanId"])
        self.assertEqual(device["traceId"], host["traceId"])
        self.assertEqual(attributes(device)["lens.device"], "cuda:0")
        self.assertAlmostEqual(duration_ms(device), 15.0, delta=0.15)
        self.assertLess(duration_ms(host), 5.0, "the host span only launched the kernel")
        skipped = run.metric("lens.device.skipped")
        self.assertEqual(sum(int(p["asInt"]) for p in skipped["sum"]["dataPoints"]), 0)

    def test_only_the_device_span_groups_are_timed(self):
        fake = simulator()
        stream = fake.fake_cuda_stream_create()
        with self.run_with_device_timing(NEMO_LENS_DEVICE_SPAN_GROUPS="microbatch") as run:
            lens.set_device_stream(stream)  # a raw handle
            with managed_span(MegatronSpanGroup.LAYER, "megatron.layer.forward"):
                fake.fake_cuda_launch_kernel(stream, 1000.0)
            with managed_span(MegatronSpanGroup.MICROBATCH, "megatron.microbatch.forward"):
                fake.fake_cuda_launch_kernel(stream, 1000.0)
        self.assertEqual([s["name"] for s in run.spans if s["name"].endswith(".device")],
                         ["megatron.microbatch.forward.device"])

    def test_a_stream_that_is_not_one_is_a_type_error(self):
        for bad in ("stream", -1, 1.5, True, TorchLikeStream("x")):
            with self.assertRaises(TypeError, msg=repr(bad)):
                lens.set_device_stream(bad)
        lens.set_device_stream(None)
        self.assertEqual(lens.device_stream(), 0)

    def test_a_misspelt_device_group_fails_setup(self):
        with self.assertRaises(lens.ConfigError) as raised:
            with self.run_with_device_timing(NEMO_LENS_DEVICE_SPAN_GROUPS="layers"):
                pass
        self.assertIn("NEMO_LENS_DEVICE_SPAN_GROUPS", str(raised.exception))
        self.assertIn("layer", str(raised.exception))


class RuntimeFoundByName(unittest.TestCase):
    """The runtime as a user's machine has it: no LENS_CUDART_LIBRARY, `libcudart.so.12` found by dlopen's search
    (LD_LIBRARY_PATH here; the CUDA toolkit's or PyTorch's library directory there). A process of its own: the
    loader reads LD_LIBRARY_PATH when a process starts."""

    CHILD = textwrap.dedent("""
        import ctypes
        import lens
        from lens.helpers import managed_span
        from lens.megatron import MegatronSpanGroup
        from support import Run
        fake = ctypes.CDLL("libcudart.so.12")  # by name, as lens loads it: the same library, one device
        fake.fake_cuda_stream_create.restype = ctypes.c_void_p
        fake.fake_cuda_launch_kernel.argtypes = [ctypes.c_void_p, ctypes.c_double]
        stream = fake.fake_cuda_stream_create()
        with Run("all", MegatronSpanGroup, NEMO_LENS_DEVICE_TIMING="cuda") as run:
            lens.set_device_stream(stream)
            with managed_span(MegatronSpanGroup.LAYER, "megatron.layer.forward"):
                fake.fake_cuda_launch_kernel(stream, 2000.0)
        print(sorted(s["name"] for s in run.spans))
    """)

    def test_libcudart_so_12_on_the_library_path_is_found(self):
        env = {k: v for k, v in os.environ.items() if k != "LENS_CUDART_LIBRARY"}
        env["LD_LIBRARY_PATH"] = os.path.dirname(FAKE_CUDART)
        result = subprocess.run([sys.executable, "-c", self.CHILD], cwd=os.path.dirname(os.path.abspath(__file__)),
                                env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("'megatron.layer.forward.device'", result.stdout)
        self.assertNotIn("device timing (DEVICE_TIMING=cuda) is off", result.stderr)


class GpuCheck(unittest.TestCase):
    """scripts/gpu_check.sh, as docs/GPU.md tells a user to run it: here, where PyTorch has no CUDA device, it says
    so and exits 77 (nothing checked), never a pass."""

    def test_without_a_gpu_it_checks_nothing_and_says_so(self):
        script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu_check.sh")
        result = subprocess.run([script, "--iterations", "3"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "LENS_GPU_PYTHON": sys.executable})
        self.assertEqual(result.returncode, 77, result.stdout + result.stderr)
        self.assertIn("nothing checked", result.stderr)


if __name__ == "__main__":
    unittest.main()
