"""set_enabled_span_groups before any setup (a library's own tests do this), then a setup that resolves the
config's groups, then a Megatron-only group name (the async-checkpoint worker's `trace_region`) after a setup with
the base catalogue."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="default")

from capture import note  # noqa: E402
from nemo.lens import NemoLensConfig, set_enabled_span_groups, setup_telemetry  # noqa: E402
from nemo.lens.state import is_span_group_enabled  # noqa: E402

set_enabled_span_groups(frozenset({"step"}))
note("before setup: step", is_span_group_enabled("step"))
handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
note("after setup: step", is_span_group_enabled("step"))
note("after setup: job", is_span_group_enabled("job"))
try:
    set_enabled_span_groups(frozenset({"trace_region", "job"}))
    note("megatron-only name", "accepted")
    note("megatron-only name: trace_region", is_span_group_enabled("trace_region"))
except Exception as e:  # noqa: BLE001
    note("megatron-only name", type(e).__name__)
handle.shutdown()
