"""Span-group state as NeMo Lens's `nemo.lens.state` serves it: the check every instrumentation site of today's
Megatron-LM imports (`from nemo.lens.state import is_span_group_enabled`), and the pipeline's trace carrier.

    from lens.state import is_span_group_enabled
    if is_span_group_enabled("microbatch"): ...

Without this module Megatron's import of it failed and its whole training loop fell back to its no-op stubs,
silently. Here the state is lens's own (the native enabled set that every span site reads, and the names beside
it that lens.helpers serves), not a copy: `set_enabled_span_groups` and `lens ctl` change what these functions answer
at once.
"""

from lens import _native
from lens._native import is_span_group_enabled
from lens.telemetry import live_group_cls, set_enabled_span_groups

__all__ = ["is_span_group_enabled", "enabled_span_groups", "pending_span_groups", "set_enabled_span_groups",
           "set_pp_trace_carrier", "get_pp_trace_carrier"]

_pp_trace_carrier = None


def enabled_span_groups():
    """The names of the span groups enabled now, as a frozenset: lens's own set and the other names
    set_enabled_span_groups enabled (empty after a setup on a rank that does not export)."""
    bits = _native.enabled_span_groups()
    own = frozenset(name for i, name in enumerate(live_group_cls().group_order()) if bits >> i & 1)
    return own | _native.other_span_groups()


def pending_span_groups():
    """NeMo Lens's (with its SpanRegistry): the names of the spec no registration has declared yet, waiting for
    one. Always empty on lens: setup resolves the spec once and refuses a name no catalogue knows (CONTRACT §1)."""
    return frozenset()


def set_pp_trace_carrier(carrier):
    """Keeps the pipeline-parallel trace carrier (a dict of W3C headers, or None) for cross-stage linking, as
    Megatron's training loop does after broadcasting the trace context."""
    global _pp_trace_carrier
    if carrier is not None and not isinstance(carrier, dict):
        raise TypeError(f"set_pp_trace_carrier: a dict or None, not {type(carrier).__name__}")
    _pp_trace_carrier = carrier


def get_pp_trace_carrier():
    """The carrier set_pp_trace_carrier kept, or None."""
    return _pp_trace_carrier
