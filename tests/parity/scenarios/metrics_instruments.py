"""The handle's meter on an exporting rank: a counter, an up-down counter, a histogram and a gauge, with attributes,
as Megatron's training metrics record them (a histogram of step times, a gauge of the loss, a counter of skipped
iterations)."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="default", NEMO_LENS_METRICS_ENABLED="1")

from nemo.lens import NemoLensConfig, setup_telemetry  # noqa: E402

handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
meter = handle.meter
steps = meter.create_histogram("megatron.training.step_duration_ms", unit="ms", description="one step")
loss = meter.create_gauge("megatron.training.loss")
skipped = meter.create_counter("megatron.training.skipped_iters")
in_flight = meter.create_up_down_counter("parity.in_flight", unit="{request}")
for step, ms in enumerate((101.0, 99.5, 250.0, 100.25)):
    steps.record(ms, {"phase": "train"})
    loss.set(2.5 - 0.1 * step)
skipped.add(1)
skipped.add(2, {"reason": "nan"})
in_flight.add(3)
in_flight.add(-1)
handle.shutdown()
