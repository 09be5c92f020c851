"""No-op stand-ins for the five helpers, importable with no native code (CONTRACT §11).

Call sites import these when lens (or NeMo Lens) is not installed, so instrumentation never needs a guard::

    try:
        from nemo.lens.helpers import managed_span as _otel_managed_span
    except ImportError:
        from lens.fallbacks import managed_span as _otel_managed_span

This module imports nothing of lens's and nothing outside the standard library.
"""

__all__ = ["managed_span", "trace_fn", "span_cm", "is_span_group_enabled", "safe_set_span_attributes"]


class _NoSpan:
    """A context manager that yields None and lets every exception through."""

    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, exc_type, exc, traceback):
        return False


_NO_SPAN = _NoSpan()


def managed_span(group, name, tracer=None, **attributes):
    return _NO_SPAN


def span_cm(name, tracer=None, record_exception=True, **attributes):
    return _NO_SPAN


def trace_fn(group, name, tracer=None):
    def decorate(function):
        return function

    return decorate


def is_span_group_enabled(group):
    return False


def safe_set_span_attributes(span, attributes, redact_keys=None):
    return None
