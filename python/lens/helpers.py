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
"""

import functools

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
    """A span for a `with` block, whatever groups are on (ungated); nothing where telemetry is off."""
    return _native.start_span(name, attributes=attributes or None, record_exception=record_exception, redact=True)


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
