"""The helpers on a rank that does not export (rank 0 of 2; NeMo Lens's default strategy exports the last rank):
what each yields, whether span methods work on it, and set_enabled_span_groups after such a setup."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all")

from capture import note  # noqa: E402
from nemo.lens import NemoLensConfig, set_enabled_span_groups, setup_telemetry  # noqa: E402
from nemo.lens.helpers import managed_span, span_cm, trace_fn  # noqa: E402
from nemo.lens.state import is_span_group_enabled  # noqa: E402

handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=2)
note("is_exporting", handle.is_exporting)
note("step enabled after setup", is_span_group_enabled("step"))
with span_cm("outer") as span:
    note("span_cm yields", type(span).__name__ if span is None else "a span")
    note("span_cm recording", span is not None and span.is_recording())
    try:
        span.set_attribute("a", 1)
        note("span_cm set_attribute", "ok")
    except Exception as e:  # noqa: BLE001
        note("span_cm set_attribute", type(e).__name__)
with managed_span("step", "inner") as span:
    note("managed_span yields (groups from setup)", "None" if span is None else "a span")
set_enabled_span_groups(frozenset({"step"}))
note("step enabled after set_enabled_span_groups", is_span_group_enabled("step"))
with managed_span("step", "inner.after") as span:
    note("managed_span yields (after set_enabled_span_groups)", "None" if span is None else "a span")
    note("managed_span recording (after)", span is not None and span.is_recording())


@trace_fn("step", "traced")
def work():
    return 7


note("trace_fn returns", work())
handle.shutdown()
