"""The public API of the lens package, re-exported by lens/__init__.py (which see)."""

import enum

from lens import _native
from lens._native import ConfigError, RankStrategyInput, SamplingStrategyInput, Span
from lens.config import Config, NemoLensConfig
from lens.groups import SpanGroup
from lens.helpers import is_span_group_enabled, managed_span, safe_set_span_attributes, span_cm, trace_fn
from lens.propagation import (SpanContext, create_linked_span, current_context, extract, from_bytes, inject,
                              to_bytes)
from lens.telemetry import (TelemetryHandle, register_export_strategy, register_rank_strategy,
                            register_sampling_strategy, set_enabled_span_groups, setup_telemetry)
from lens import groups, helpers, fallbacks, logging_bridge, megatron, sampling  # noqa: F401: submodules

__version__ = _native.LENS_VERSION


class StatusCode(enum.IntEnum):
    """A span's status (OpenTelemetry's StatusCode)."""
    UNSET = 0
    OK = 1
    ERROR = 2


step_trace_id = _native.step_trace_id
# A running job's span groups switched by `lens ctl` at the same iteration on every rank (lens/control.h): at each
# iteration boundary, all-reduce take_span_group_request()'s 4 words with MAX, then pass the result to
# at_iteration_boundary(iteration, words) on every rank.
take_span_group_request = _native.take_span_group_request
at_iteration_boundary = _native.at_iteration_boundary
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
    "Config", "ConfigError", "NemoLensConfig", "RankStrategyInput", "SamplingStrategyInput", "Span", "SpanContext",
    "SpanGroup", "StatusCode", "TelemetryHandle", "at_iteration_boundary", "build_worker_bootstrap", "create_linked_span", "current_context",
    "extract", "from_bytes", "inject", "is_span_group_enabled", "managed_span", "register_export_strategy",
    "register_rank_strategy", "register_sampling_strategy", "resolve_run_id", "run_uuids",
    "safe_set_span_attributes", "set_enabled_span_groups", "setup_telemetry", "setup_worker_telemetry", "span_cm",
    "step_trace_id", "take_span_group_request", "to_bytes", "trace_fn", "uuid5_url",
]
