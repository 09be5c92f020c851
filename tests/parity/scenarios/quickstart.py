"""NeMo Lens's README quickstart, as written there (a step span per iteration, its loss set when the span is live)."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="per_step")

from nemo.lens import NemoLensConfig, managed_span, setup_telemetry  # noqa: E402

config = NemoLensConfig.from_env()
handle = setup_telemetry(config, rank=0, world_size=1)
try:
    for i in range(3):
        with managed_span("step", "train.step", iteration=i) as span:
            loss = 1.0 / (i + 1)
            if span:
                span.set_attribute("loss", loss)
finally:
    handle.shutdown()
