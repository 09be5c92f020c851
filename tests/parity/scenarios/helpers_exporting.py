"""The four helpers on an exporting rank: span_cm (ungated, with attributes and a redacted one), managed_span (an
exception recorded and re-raised), trace_fn, and create_linked_span (a span linked to another trace)."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all")

from capture import note  # noqa: E402
from nemo.lens import NemoLensConfig, setup_telemetry  # noqa: E402
from nemo.lens.distributed import create_linked_span  # noqa: E402
from nemo.lens.helpers import managed_span, span_cm, trace_fn  # noqa: E402

handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
note("is_exporting", handle.is_exporting)


@trace_fn("step", "traced.function")
def work(x):
    return x * 2


with span_cm("outer", phase="train", token="secret-value", count=3) as outer:
    note("span_cm is recording", outer.is_recording())
    with managed_span("step", "inner", layer=1) as inner:
        inner.set_attribute("set.later", True)
        note("work", work(21))
    try:
        with managed_span("forward_backward", "fails"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    remote = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    linked = create_linked_span(handle.tracer, "linked.one", remote_carrier=remote, stage=1)
    linked.end()
handle.shutdown()
