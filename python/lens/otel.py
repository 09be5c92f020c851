"""lens as OpenTelemetry Python's API implementation (CONTRACT §11): what code written against `opentelemetry-api`
records through lens's pipeline.

setup_telemetry calls install() where `opentelemetry-api` is importable; then, in the whole process::

    from opentelemetry import context, trace, metrics
    tracer = trace.get_tracer(__name__)              # lens's tracer (lens.tracer.Tracer)
    span = tracer.start_span("megatron.startup", context=context.Context(), start_time=launch_ns)
    token = context.attach(trace.set_span_in_context(span))
    with managed_span(SpanGroup.STEP, "step"):       # a child of span; and trace.get_current_span() is this step
        ...
    context.detach(token)
    span.end()
    metrics.get_meter(__name__).create_histogram("step_ms").record(412.5)

One current span for both APIs and both languages: context.attach/detach push and pop lens's thread-local context
(the one C++ spans and managed_span read), and context.get_current() answers with lens's current span when a lens
span (Python or C++) was made current after the last attach; the three are C (lens._native.RuntimeContext).
OpenTelemetry's context stays in its contextvars as
well, so its other keys (baggage, suppression) behave as they do without lens. Spans from the OpenTelemetry API name
no span group: they are recorded wherever this rank records any group (lens.tracer says more).

Without `opentelemetry-api` this module is not imported and nothing changes.
"""

import logging
import threading

from opentelemetry import _logs as otel_logs
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.context.context import Context
from opentelemetry.trace.propagation import _SPAN_KEY

import lens.metrics
import lens.tracer
from lens import _native

_logger = logging.getLogger("lens")

# lens's objects are OpenTelemetry's for isinstance (use_span checks that its span is a trace.Span).
otel_trace.Span.register(_native.Span)
otel_trace.Span.register(lens.tracer.NonRecordingSpan)
otel_trace.Tracer.register(lens.tracer.Tracer)
otel_metrics.Meter.register(lens.metrics.Meter)


def _otel_span_context(context):
    """OpenTelemetry's SpanContext of a lens.SpanContext."""
    return otel_trace.SpanContext(context.trace_id, context.span_id, context.is_remote,
                                  otel_trace.TraceFlags(context.trace_flags))


class OtelFacingSpan(otel_trace.Span):
    """A lens span as OpenTelemetry's context hands it out: every call goes to the lens span, and
    get_span_context() gives OpenTelemetry's SpanContext, which the OpenTelemetry SDK's tracers (a provider of the
    user's own, beside lens) and propagators require of a parent. The calls that need no conversion are the lens
    span's own methods, bound once here: `get_current_span().set_attribute(k, v)` runs no Python frame of lens's."""

    _FORWARDED = ("end", "set_attributes", "set_attribute", "add_event", "update_name", "is_recording", "set_status",
                  "record_exception")
    __slots__ = ("lens_span", *_FORWARDED)

    def __init__(self, lens_span):
        self.lens_span = lens_span
        for name in self._FORWARDED:
            setattr(self, name, getattr(lens_span, name))

    def get_span_context(self):
        return _otel_span_context(self.lens_span.get_span_context())

    def add_link(self, context, attributes=None):
        link = lens.tracer.lens_context(context)
        if link is not None:  # OpenTelemetry drops a link to an invalid context
            self.lens_span.add_link(link, attributes)

    def __repr__(self):
        return f"OtelFacingSpan({self.lens_span!r})"


_said_under_open_spans = False


def _say_under_open_spans():
    """Once a process (a loop that does it every step must not flood the log)."""
    global _said_under_open_spans
    if not _said_under_open_spans:
        _said_under_open_spans = True
        _logger.warning("lens: a context detached while a span started after its attach is still open stays on "
                        "lens's context stack (detach in the reverse order of attach)")


def _with_span_context(context, lens_span_context):
    """`context` with a non-recording span of a lens.SpanContext made current alone (C++'s ContextScope)."""
    return Context({**context, _SPAN_KEY: otel_trace.NonRecordingSpan(_otel_span_context(lens_span_context))})


def runtime_context(inner):
    """OpenTelemetry's runtime context kept in step with lens's context stack, over OpenTelemetry's own `inner`
    (lens._native.RuntimeContext: attach, detach and get_current are C)."""
    return _native.RuntimeContext(inner, _SPAN_KEY, Context, OtelFacingSpan, _with_span_context,
                                  _say_under_open_spans)


class TracerProvider(otel_trace.TracerProvider):
    """Gives lens's tracer, whatever the instrumentation scope."""

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None, schema_url=None,
                   attributes=None):
        return lens.tracer.Tracer(instrumenting_module_name, instrumenting_library_version, schema_url, attributes)

    def force_flush(self, timeout_millis=30000):
        """Exports every span ended so far (lens's live setup); False when it could not in time."""
        from lens.telemetry import live_handle
        handle = live_handle()
        return handle.force_flush(timeout_millis) if handle is not None else True

    def shutdown(self):
        from lens.telemetry import live_handle
        handle = live_handle()
        if handle is not None:
            handle.shutdown()


class MeterProvider(otel_metrics.MeterProvider):
    """Gives lens's meter, whatever the instrumentation scope."""

    def get_meter(self, name, version=None, schema_url=None, attributes=None):
        return lens.metrics.Meter(name, version, schema_url, attributes)

    def force_flush(self, timeout_millis=30000):
        lens.metrics.observe_now()
        return TracerProvider.force_flush(self, timeout_millis)

    def shutdown(self, timeout_millis=30000):
        TracerProvider.shutdown(self)


class Logger(otel_logs.Logger):
    """Emits OpenTelemetry log records into lens's logs signal (with the current span's ids)."""

    def emit(self, record=None, *, timestamp=None, observed_timestamp=None, context=None, severity_number=None,
             severity_text=None, body=None, attributes=None, event_name=None, exception=None):
        if record is not None:
            timestamp, severity_number = record.timestamp, record.severity_number
            severity_text, body, attributes = record.severity_text, record.body, record.attributes
        number = int(getattr(severity_number, "value", severity_number) or 9)
        if not _native.should_log(number):
            return
        attributes = dict(attributes or {})
        if event_name:
            attributes["event.name"] = event_name
        if exception is not None:
            attributes["exception.type"] = type(exception).__qualname__
            attributes["exception.message"] = str(exception)
        _native.emit_log(number, severity_text or "", "" if body is None else str(body), attributes,
                         int(timestamp or 0))

    def enabled(self, *, context=None, severity_number=None, event_name=None):
        return _native.should_log(int(getattr(severity_number, "value", severity_number) or 9))


class LoggerProvider(otel_logs.LoggerProvider):
    def get_logger(self, name, version=None, schema_url=None, attributes=None):
        return Logger(name, version, schema_url, attributes)


_install_lock = threading.Lock()


def install():
    """Makes lens OpenTelemetry's runtime context and its global tracer, meter and logger providers (once per
    process; a provider set before by other code is replaced, with a warning)."""
    with _install_lock:
        if not isinstance(otel_context._RUNTIME_CONTEXT, _native.RuntimeContext):
            otel_context._RUNTIME_CONTEXT = runtime_context(otel_context._RUNTIME_CONTEXT)
        _replace_global(otel_trace.set_tracer_provider, otel_trace, "_TRACER_PROVIDER", "_TRACER_PROVIDER_SET_ONCE",
                        TracerProvider)
        meters = otel_metrics._internal
        _replace_global(otel_metrics.set_meter_provider, meters, "_METER_PROVIDER", "_METER_PROVIDER_SET_ONCE",
                        MeterProvider, meters._PROXY_METER_PROVIDER.on_set_meter_provider)
        _replace_global(otel_logs.set_logger_provider, otel_logs._internal, "_LOGGER_PROVIDER",
                        "_LOGGER_PROVIDER_SET_ONCE", LoggerProvider)


def _replace_global(setter, module, attribute, once_attribute, provider_class, tell_proxies=None):
    """OpenTelemetry lets a global provider be set once per process (a later set_*_provider warns and is ignored):
    the first time, lens uses the setter; if other code set its own provider before, lens writes the global itself
    and says so."""
    present = getattr(module, attribute, None)
    if isinstance(present, provider_class):
        return
    provider = provider_class()
    if present is None and not getattr(module, once_attribute)._done:
        setter(provider)
        return
    _logger.warning("lens: replacing the global OpenTelemetry %s (%s) with lens's", attribute.strip("_").lower(),
                    type(present).__name__)
    setattr(module, attribute, provider)
    if tell_proxies is not None:
        tell_proxies(provider)


__all__ = ["Logger", "LoggerProvider", "MeterProvider", "TracerProvider", "install"]
