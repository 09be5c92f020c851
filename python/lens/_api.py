"""The public API of the lens package, re-exported by lens/__init__.py (which see)."""

import enum

from lens import _native
from lens._native import ConfigError, RankStrategyInput, SamplingStrategyInput, Span
from lens.config import Config, NemoLensConfig
from lens.distributed import broadcast_trace_context
from lens.groups import SpanGroup, SpanRegistry
from lens.helpers import (DEFAULT_REDACT_KEYS, is_span_group_enabled, managed_span, redact_value,
                          safe_set_span_attributes, span_cm, trace_fn)
from lens.metrics import Meter
from lens.package_info import (__contact_emails__, __contact_names__, __download_url__, __homepage__,
                               __package_name__, __repository_url__, __version__)
from lens.propagation import (SpanContext, create_linked_span, current_context, extract, extract_context, from_bytes,
                              inject, inject_context, to_bytes)
from lens.resources import encode_resource_attributes
from lens.state import enabled_span_groups, pending_span_groups
from lens.strategies import (ExportStrategy, register_export_strategy, registered_strategies,
                             unregister_export_strategy)
from lens.telemetry import (TelemetryHandle, register_rank_strategy, register_sampling_strategy,
                            set_enabled_span_groups, setup_telemetry)
from lens.tracer import Tracer
from lens import (groups, helpers, fallbacks, logging_bridge, megatron, resources, sampling,  # noqa: F401
                  semconv, state, strategies, tracer)
import lens.handle  # noqa: F401  (NeMo Lens's module; build_worker_bootstrap's argument is also named handle)


def get_tracer(name="nemo.lens"):
    """lens's tracer (what opentelemetry.trace.get_tracer gives once lens is set up; NeMo Lens's get_tracer)."""
    return Tracer(name)


def get_meter(name="nemo.lens"):
    """lens's meter (what opentelemetry.metrics.get_meter gives once lens is set up; NeMo Lens's get_meter)."""
    return Meter(name)


class StatusCode(enum.IntEnum):
    """A span's status (OpenTelemetry's StatusCode)."""
    UNSET = 0
    OK = 1
    ERROR = 2


step_trace_id = _native.step_trace_id
step_root_span_id = _native.step_root_span_id
derived_span_id = _native.derived_span_id
# A running job's span groups switched by `lens ctl` at the same iteration on every rank (lens/control.h): at each
# iteration boundary, all-reduce take_span_group_request()'s 4 words with MAX, then pass the result to
# at_iteration_boundary(iteration, words) on every rank.
take_span_group_request = _native.take_span_group_request
at_iteration_boundary = _native.at_iteration_boundary
# Stragglers found while the job trains (lens/straggler.h): `with step_phase("compute")` / `step_phase("wait")`
# around forward/backward and receives/gradient sync, end_step(iteration) after each step, and every
# STRAGGLER_INTERVAL steps (straggler_summary_due) gather take_straggler_summary()'s words from every rank with
# a SUM all-reduce and pass them, one list per rank, to score_stragglers on every rank (the exporting rank hands
# them to lens's scoring thread and returns at once); take_straggler_findings() gives what was scored since.
step_phase = _native.step_phase
end_step = _native.end_step
straggler_summary_due = _native.straggler_summary_due
take_straggler_summary = _native.take_straggler_summary
score_stragglers = _native.score_stragglers
take_straggler_findings = _native.take_straggler_findings
# Device time (docs/GPU.md): with DEVICE_TIMING=cuda, the spans of DEVICE_SPAN_GROUPS record CUDA events on the
# calling thread's stream: set_device_stream(torch.cuda.current_stream()) (or a raw handle, or None for the default).
set_device_stream = _native.set_device_stream
device_stream = _native.device_stream
resolve_run_id = _native.resolve_run_id
run_uuids = _native.run_uuids
uuid5_url = _native.uuid5_url


def build_worker_bootstrap(handle, resource_attributes=None, link=None):
    """The text a helper process (a checkpoint writer) sets its telemetry up from (CONTRACT §9): this rank's
    service, span groups, rank, run id and resource, and a span to link to (default: the current one)."""
    return _native.build_worker_bootstrap(handle._native, resource_attributes, link)


def setup_worker_telemetry(bootstrap, config):
    """The helper process's setup from build_worker_bootstrap's text and its own config (exporter, OTEL_*)."""
    return TelemetryHandle(_native.setup_worker_telemetry(bootstrap, config), config)


__all__ = [
    # NeMo Lens's names (its __init__), in its order
    "__version__", "__package_name__", "__contact_names__", "__contact_emails__", "__homepage__",
    "__repository_url__", "__download_url__", "NemoLensConfig", "SpanGroup", "SpanRegistry", "TelemetryHandle",
    "setup_telemetry", "span_cm", "managed_span", "trace_fn", "safe_set_span_attributes", "redact_value",
    "DEFAULT_REDACT_KEYS", "inject_context", "extract_context", "encode_resource_attributes", "get_tracer",
    "get_meter", "is_span_group_enabled", "set_enabled_span_groups", "enabled_span_groups", "pending_span_groups",
    "broadcast_trace_context", "create_linked_span", "ExportStrategy", "register_export_strategy",
    "registered_strategies", "unregister_export_strategy",
    # lens's own
    "Config", "ConfigError", "RankStrategyInput", "SamplingStrategyInput", "Span", "SpanContext", "StatusCode",
    "Tracer", "at_iteration_boundary", "build_worker_bootstrap", "current_context", "extract", "from_bytes", "inject",
    "register_rank_strategy", "register_sampling_strategy", "resolve_run_id", "run_uuids", "setup_worker_telemetry",
    "set_device_stream", "device_stream",
    "end_step", "score_stragglers", "step_phase", "straggler_summary_due", "take_straggler_findings",
    "take_straggler_summary",
    "step_trace_id", "step_root_span_id", "derived_span_id", "take_span_group_request", "to_bytes", "uuid5_url",
]
