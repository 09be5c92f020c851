"""NeMo Lens's rank-aware sampler (SAMPLER_ENABLED) at rate 0.5 with every rank exporting, on one rank: what the
rank keeps. Imported by the two scenarios that run it on a rank the rule samples (3) and on one it drops (1)."""
import os

from capture import note
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.helpers import managed_span, span_cm


def run_on(rank):
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_EXPORT_STRATEGY="all_ranks",
                      NEMO_LENS_RANK_STRATEGY="all_ranks", NEMO_LENS_SAMPLER_ENABLED="1",
                      NEMO_LENS_EXPORT_SAMPLE_RATE="0.5", NEMO_LENS_METRICS_ENABLED="0")
    handle = setup_telemetry(NemoLensConfig.from_env(), rank=rank, world_size=8)
    note("is_exporting", handle.is_exporting)
    with span_cm(f"rank{rank}.top"):
        with managed_span("step", f"rank{rank}.step") as span:
            note("managed_span recording", span is not None and span.is_recording())
    handle.shutdown()
