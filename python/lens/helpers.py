"""The call-site helpers of NeMo Lens, on lens (CONTRACT §11): what instrumented training code imports.

    from lens.helpers import managed_span, trace_fn, is_span_group_enabled

    with managed_span(MegatronSpanGroup.LAYER, "megatron.layer.forward", layer=i) as span:
        ...                                   # span is None while the group is off; the body runs either way

    @trace_fn(MegatronSpanGroup.STEP, "megatron.train_step")
    def train_step(...): ...

managed_span, is_span_group_enabled and the calls of a trace_fn function are C (lens._native): with the group off,
each costs about what `with contextlib.nullcontext():`, a call of `len`, and a call through functools.partial cost.
An Exception leaving a span is recorded (the `exception` event, ERROR status) and re-raised; a BaseException that
is not an Exception (KeyboardInterrupt, SystemExit) ends the span unrecorded. The `tracer` arguments are accepted
for compatibility: lens has one tracer per process. As in NeMo Lens, a str attribute under one of
DEFAULT_REDACT_KEYS ("prompt", "token", "key", ...) given to managed_span, span_cm or safe_set_span_attributes is
recorded as "[REDACTED]" (span.set_attribute records what it is given).

Where lens records nothing (before any setup, on a rank that does not export), a group enabled with
set_enabled_span_groups has its spans made by OpenTelemetry's global tracer provider, as NeMo Lens's helpers make
all of theirs: a test that sets an SDK TracerProvider and enables groups, with no setup, captures the spans it
would capture on NeMo Lens. span_cm there goes to the same provider. Once lens is set up it is that provider, and
such spans are non-recording. A group outside the live catalogue (a library's own, as Megatron's trace_region under
the base catalogue) is recorded on an exporting rank as a span of no group (ungated), as span_cm's are.
"""

import contextlib
import functools
import sys

from lens import _native
from lens._native import is_span_group_enabled, managed_span

__all__ = ["managed_span", "trace_fn", "span_cm", "is_span_group_enabled", "safe_set_span_attributes",
           "redact_value", "DEFAULT_REDACT_KEYS"]

_ATTRIBUTE_TYPES = (bool, int, float, str)
# NeMo Lens's default redaction: a str attribute under one of these keys is replaced by REDACTED, in
# safe_set_span_attributes and in the attributes managed_span and span_cm take (native/attributes.h has the same).
DEFAULT_REDACT_KEYS = frozenset({"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"})
REDACTED = "[REDACTED]"


def trace_fn(group, name, tracer=None):
    """Decorator: each call is a span named `name` while `group` is on (checked at every call). The function keeps
    its name, docstring and signature (functools.update_wrapper); methods bind as usual."""

    def decorate(function):
        traced = _native.TracedFunction(function, group, name)
        functools.update_wrapper(traced, function)
        return traced

    return decorate


def span_cm(name, tracer=None, record_exception=True, **attributes):
    """A span for a `with` block, whatever groups are on (ungated): lens's where lens records spans, else one of
    OpenTelemetry's global tracer provider (non-recording unless the application set its own)."""
    if not _native.records_ungated_spans():
        other = _other_global_tracer()
        if other is not None:
            return _global_span_cm(other, name, record_exception, attributes)
    return _native.start_span(name, attributes=attributes or None, record_exception=record_exception, redact=True)


def use_other_span_groups(names):
    """Makes the helpers treat `names` (a frozenset) as enabled beside lens's own set: lens.telemetry's
    set_enabled_span_groups gives the names it could not enable in lens's set."""
    _native.set_other_span_groups(frozenset(names), _global_managed_span, _global_traced_span)


def _other_global_tracer():
    """OpenTelemetry's global tracer where its global provider is not lens's (an application's SDK provider, or
    OpenTelemetry's proxy before one is set); None where it is lens's or opentelemetry-api is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    otel = sys.modules.get("lens.otel")
    if otel is not None and isinstance(trace.get_tracer_provider(), otel.TracerProvider):
        return None
    return trace.get_tracer("nemo.lens")


@contextlib.contextmanager
def _global_managed_span(name, **attributes):
    """managed_span of an enabled group lens records nothing of here: the global provider's span, current inside;
    an Exception is recorded with ERROR status described by its message, as NeMo Lens's managed_span does."""
    tracer = _other_global_tracer()
    if tracer is None:
        with _native.start_span(name) as span:  # lens's own, recording nothing here
            yield span
        return
    with tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False) as span:
        safe_set_span_attributes(span, attributes)
        try:
            yield span
        except Exception as error:
            from opentelemetry.trace import Status, StatusCode
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
            raise


def _global_traced_span(name):
    """The span of one call of a trace_fn function whose group lens records nothing of here."""
    tracer = _other_global_tracer()
    return tracer.start_as_current_span(name) if tracer is not None else _native.start_span(name)


@contextlib.contextmanager
def _global_span_cm(tracer, name, record_exception, attributes):
    with tracer.start_as_current_span(name, record_exception=record_exception) as span:
        safe_set_span_attributes(span, attributes)
        yield span


def redact_value(key, value, redact_keys=DEFAULT_REDACT_KEYS):
    """'[REDACTED]' when `key` is one of `redact_keys`, else `value` (NeMo Lens's)."""
    return REDACTED if key in redact_keys else value


def safe_set_span_attributes(span, attributes, redact_keys=DEFAULT_REDACT_KEYS):
    """Sets the attributes that have an attribute form on `span` (None or a non-recording span: nothing). Drops
    None values and unsupported types; a str value under one of `redact_keys` becomes '[REDACTED]'; never raises."""
    if span is None or not attributes:
        return
    try:
        kept = {}
        for key, value in attributes.items():
            if not isinstance(key, str) or value is None:
                continue
            if isinstance(value, _ATTRIBUTE_TYPES):
                kept[key] = redact_value(key, value, redact_keys) if isinstance(value, str) else value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, _ATTRIBUTE_TYPES) for v in value):
                kept[key] = list(value)
        if kept:
            span.set_attributes(kept)
    except Exception:  # noqa: BLE001: telemetry must not stop the caller
        pass
