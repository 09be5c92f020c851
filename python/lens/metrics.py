"""Metrics with OpenTelemetry Python's instrument names (CONTRACT §8), recorded by lens's C++ library.

    counter = handle.meter.create_counter("trainer.samples", unit="{sample}", description="Samples seen.")
    counter.add(32, {"phase": "train"})
    handle.meter.create_histogram("trainer.step_ms", unit="ms").record(412.5)

The same name gives the same instrument; a name taken by another kind raises ValueError. Measurements are kept only
on an exporting rank with metrics on; elsewhere a call returns at once.
"""

from lens import _native

_Kind = _native.InstrumentKind


class _Instrument:
    __slots__ = ("_native", "name")

    def __init__(self, kind, name, unit, description, bounds=None):
        self._native = _native.instrument(kind, name, unit or "", description or "", bounds)
        self.name = name

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


class Counter(_Instrument):
    def add(self, amount, attributes=None, context=None):
        """Adds a non-negative amount (a negative one is ignored, as OpenTelemetry says)."""
        self._native._measure(amount, attributes)


class UpDownCounter(_Instrument):
    def add(self, amount, attributes=None, context=None):
        self._native._measure(amount, attributes)


class Histogram(_Instrument):
    def record(self, amount, attributes=None, context=None):
        self._native._measure(amount, attributes)


class Gauge(_Instrument):
    def set(self, amount, attributes=None, context=None):
        """The value now (OpenTelemetry Python's synchronous gauge)."""
        self._native._measure(amount, attributes)

    record = set


class Meter:
    """lens's one meter: instruments are the process's, whatever meter creates them."""

    def create_counter(self, name, unit="", description=""):
        return Counter(_Kind.COUNTER, name, unit, description)

    def create_up_down_counter(self, name, unit="", description=""):
        return UpDownCounter(_Kind.UP_DOWN_COUNTER, name, unit, description)

    def create_histogram(self, name, unit="", description="", explicit_bucket_boundaries_advisory=None):
        bounds = list(explicit_bucket_boundaries_advisory) if explicit_bucket_boundaries_advisory else None
        return Histogram(_Kind.HISTOGRAM, name, unit, description, bounds)

    def create_gauge(self, name, unit="", description=""):
        return Gauge(_Kind.GAUGE, name, unit, description)
