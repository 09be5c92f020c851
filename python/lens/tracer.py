"""lens's tracer: OpenTelemetry Python's Tracer interface over lens's pipeline (CONTRACT §11).

    tracer = handle.tracer                       # or opentelemetry.trace.get_tracer(__name__) once lens is set up
    span = tracer.start_span("megatron.startup", context=opentelemetry.context.Context(),
                             start_time=launch_ns)          # a new trace, back-dated
    ...
    span.end(end_time=time.time_ns())

    with tracer.start_as_current_span("phase", attributes={"k": 1}) as span:
        ...                                      # current here: managed_span and C++ spans nest under it

Spans name no span group: they are recorded wherever this rank records spans of any group (an exporting rank with
traces on, some group enabled) and are nothing elsewhere. `context` is an OpenTelemetry Context (its span is the
parent; one without a span starts a new trace) or a lens.SpanContext; None: the current span. Beyond
OpenTelemetry's arguments, `root=True` starts a new trace whatever is current, and `trace_id` (an int, e.g.
lens.step_trace_id(run_id, iteration)) a root span in that trace. This module needs no OpenTelemetry package;
lens.otel installs it as OpenTelemetry's global tracer where one is importable.
"""

import contextlib

from lens import _native
from lens._native import SpanContext

# OpenTelemetry's SpanKind values (INTERNAL 0 .. CONSUMER 4) are OTLP's minus one.
_OTLP_KIND_OFFSET = 1


class NonRecordingSpan:
    """What a tracer gives where nothing is recorded (no setup, a rank that exports nothing), when
    OpenTelemetry's own INVALID_SPAN is not importable: every method does nothing."""

    def get_span_context(self):
        return SpanContext(0, 0, 0, False)

    def is_recording(self):
        return False

    def end(self, end_time=None):
        pass

    def set_attribute(self, key, value):
        pass

    def set_attributes(self, attributes):
        pass

    def add_event(self, name, attributes=None, timestamp=None):
        pass

    def add_link(self, context, attributes=None):
        pass

    def update_name(self, name):
        pass

    def set_status(self, status, description=None):
        pass

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def non_recording_span():
    """OpenTelemetry's INVALID_SPAN where it is importable (get_current_span's answer), else lens's own."""
    try:
        from opentelemetry.trace import INVALID_SPAN
        return INVALID_SPAN
    except ImportError:
        return _NON_RECORDING


_NON_RECORDING = NonRecordingSpan()


def lens_context(context):
    """A lens.SpanContext from a lens.SpanContext or anything shaped like OpenTelemetry's SpanContext (trace_id,
    span_id, trace_flags, is_remote); None for an invalid one. TypeError for anything else."""
    if context is None or isinstance(context, SpanContext):
        return context if context is not None and context.is_valid else None
    try:
        converted = SpanContext(int(context.trace_id), int(context.span_id), int(context.trace_flags),
                                bool(context.is_remote))
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise TypeError(f"lens: expected a SpanContext (lens's or OpenTelemetry's), not {type(context).__name__}")
    return converted if converted.is_valid else None


def span_in(context):
    """The span an OpenTelemetry Context holds (None: none), without needing OpenTelemetry when there is none."""
    try:
        from opentelemetry.trace.propagation import _SPAN_KEY
    except ImportError:
        raise TypeError(f"lens: a context is a lens.SpanContext or an OpenTelemetry Context, not "
                        f"{type(context).__name__}") from None
    if not hasattr(context, "get"):
        raise TypeError(f"lens: a context is a lens.SpanContext or an OpenTelemetry Context, not "
                        f"{type(context).__name__}")
    return context.get(_SPAN_KEY)


def _parent(context):
    """(parent lens.SpanContext or None, root) for start_span's `context`."""
    if context is None:
        return None, False
    if isinstance(context, SpanContext):
        return (context, False) if context.is_valid else (None, True)
    span = span_in(context)
    parent = lens_context(span.get_span_context()) if span is not None else None
    return parent, parent is None


def _links(links):
    """(contexts for the start, [(context, attributes)] to add after it) of OpenTelemetry Links or SpanContexts."""
    at_start, with_attributes = [], []
    for link in links or ():
        if link is None:
            continue
        context = lens_context(getattr(link, "context", link))
        if context is None:
            continue
        attributes = getattr(link, "attributes", None)
        if attributes:
            with_attributes.append((context, dict(attributes)))
        else:
            at_start.append(context)
    return at_start, with_attributes


def _kind_number(kind):
    if kind is None:
        return _OTLP_KIND_OFFSET
    value = getattr(kind, "value", kind)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 4:
        raise ValueError(f"lens: kind is an opentelemetry.trace.SpanKind (or 0-4), not {kind!r}")
    return value + _OTLP_KIND_OFFSET


class Tracer(_native.TracerBase):
    """lens's tracer for one instrumentation scope: spans go to the process's pipeline, each exported under the
    scope (name and version) the tracer was asked for, as OpenTelemetry's SDK does (scope_id says which; lens's own
    spans are in `lens`). The schema URL and scope attributes are not kept.

    start_span(name, context=None, kind=None, attributes=None, links=None, start_time=None, record_exception=True,
    set_status_on_exception=True, root=False, trace_id=None): a span started now (or at start_time, Unix
    nanoseconds), not made current; end it with span.end().

    start_as_current_span(..., end_on_exit=True, ...): a context manager: the span is current inside `with` (and
    ends at its exit unless end_on_exit=False). An Exception leaving it is recorded (ERROR status, the `exception`
    event) and re-raised.

    Both are lens._native's: the usual call (a name, attributes, kind) is C; every other form goes to
    start_span / start_as_current_span below."""

    def __init__(self, name="lens", version=None, schema_url=None, attributes=None):
        super().__init__(name, version)
        self.name = name


def start_span(tracer, name, context=None, kind=None, attributes=None, links=None, start_time=None,
               record_exception=True, set_status_on_exception=True, root=False, trace_id=None):
    """Tracer.start_span's general form."""
    if not _native.records_ungated_spans():
        return non_recording_span()
    return _start(tracer, name, context, kind, attributes, links, start_time,
                  record_exception and set_status_on_exception, root, trace_id, current=False)


def start_as_current_span(tracer, name, context=None, kind=None, attributes=None, links=None, start_time=None,
                          record_exception=True, set_status_on_exception=True, end_on_exit=True, root=False,
                          trace_id=None):
    """Tracer.start_as_current_span's general form."""
    if not _native.records_ungated_spans():
        return contextlib.nullcontext(non_recording_span())
    span = _start(tracer, name, context, kind, attributes, links, start_time,
                  record_exception and set_status_on_exception, root, trace_id, current=end_on_exit)
    return span if end_on_exit else _current_until_exit(span)


def _start(tracer, name, context, kind, attributes, links, start_time, record_exception, root, trace_id, current):
    if not isinstance(name, str):
        raise TypeError(f"lens: a span's name is a str, not {type(name).__name__}")
    parent, no_parent = _parent(context)
    at_start, with_attributes = _links(links)
    span = _native.start_span(name, attributes=attributes, links=at_start, parent=parent,
                              root=root or no_parent, trace_id=trace_id, current=current,
                              record_exception=record_exception, start_now=not current,
                              kind=_kind_number(kind), start_time=_nanos(start_time), scope=tracer.scope_id)
    for link, link_attributes in with_attributes:
        span.add_link(link, link_attributes)
    return span


_native.set_tracer_fallbacks(start_span, start_as_current_span)


def _nanos(time):
    if time is None:
        return 0
    if isinstance(time, bool) or not isinstance(time, int):
        raise TypeError(f"lens: start_time is Unix nanoseconds as an int (time.time_ns()), not {type(time).__name__}")
    if time < 0:
        raise ValueError("lens: start_time is Unix nanoseconds, not negative")
    return time


@contextlib.contextmanager
def _current_until_exit(span):
    """start_as_current_span(end_on_exit=False): current inside `with`, left open after it."""
    token = _native.push_context(span.get_span_context())
    try:
        yield span
    finally:
        _native.pop_context(token)
