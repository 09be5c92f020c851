"""Span context across processes and pipeline stages (CONTRACT §6, §11).

    carrier = {}
    inject(carrier)                              # {'traceparent': '00-...-...-01'}: W3C Trace Context
    context = extract(carrier)                   # a lens.SpanContext (remote), or None

    payload = to_bytes(span.get_span_context())  # 26 bytes: send them with the activation
    span = create_linked_span(tracer, "megatron.pp.recv_forward.linked", remote_context=from_bytes(payload),
                              **{"dl.pipeline_parallel.rank": stage})
    ...
    span.end()                                   # or `with create_linked_span(...):`

With OTEL_PROPAGATORS=none (or without tracecontext) inject writes nothing: no span context leaves the process.
"""

from lens import _native
from lens._native import SpanContext, current_context, from_bytes, from_traceparent, to_bytes, to_traceparent

__all__ = ["inject", "extract", "inject_context", "extract_context", "create_linked_span", "to_bytes", "from_bytes",
           "SpanContext", "current_context"]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


def _propagation_on():
    from lens.telemetry import live_handle
    handle = live_handle()
    return handle is None or handle.config.propagate_trace_context


def inject(carrier, context=None):
    """Writes the current (or the given) span context into `carrier` (a dict) as W3C `traceparent`."""
    context = context if context is not None else current_context()
    if not isinstance(context, SpanContext):
        raise TypeError(f"lens.inject: context must be a lens.SpanContext, not {type(context).__name__}")
    if context.is_valid and _propagation_on():
        carrier[TRACEPARENT] = to_traceparent(context)
    return carrier


def extract(carrier):
    """The span context a carrier holds (`traceparent`, any case of the key), or None."""
    if not carrier:
        return None
    if not hasattr(carrier, "items"):
        raise TypeError(f"lens.extract: a carrier is a mapping of header names to values, not {type(carrier).__name__}")
    for key, value in carrier.items():
        if isinstance(key, str) and key.lower() == TRACEPARENT and isinstance(value, str):
            return from_traceparent(value)
    return None


def inject_context(carrier):
    """NeMo Lens's name: inject() into `carrier` (returns None, as NeMo Lens's does)."""
    inject(carrier)


def extract_context(carrier):
    """NeMo Lens's: the context a carrier holds, as an OpenTelemetry Context whose span is the remote one (an
    empty Context when the carrier holds none) where opentelemetry-api is importable; without it, the
    lens.SpanContext (or None). create_linked_span(remote_context=...) and a tracer's `context` take either."""
    remote = extract(carrier)
    try:
        from opentelemetry import trace
        from opentelemetry.context import Context
    except ImportError:
        return remote
    if remote is None:
        return Context()
    return trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
        remote.trace_id, remote.span_id, True, trace.TraceFlags(remote.trace_flags))), Context())


def _link_of(remote_context):
    """The lens.SpanContext to link to: a lens.SpanContext, an OpenTelemetry SpanContext or Context, or None."""
    from lens.tracer import lens_context, span_in
    if remote_context is None or isinstance(remote_context, SpanContext) or hasattr(remote_context, "span_id"):
        return lens_context(remote_context)
    span = span_in(remote_context)
    return lens_context(span.get_span_context()) if span is not None else None


def create_linked_span(tracer, name, remote_context=None, remote_carrier=None, **attributes):
    """A span linked to a span of another process or stage: the `remote_context` (a lens or OpenTelemetry
    SpanContext, or an OpenTelemetry Context as extract_context gives), else the one `remote_carrier` holds (no
    link when neither gives one). As NeMo Lens's: started at once and not made current; end it with `.end()`
    (Megatron's pipeline correlation does) or use it as `with create_linked_span(...):`, which ends it. Ungated:
    check the group first."""
    link = _link_of(remote_context) if remote_context is not None else extract(remote_carrier)
    return _native.start_span(name, attributes=attributes or None, links=[link] if link is not None else [],
                              current=False, start_now=True, redact=True)
