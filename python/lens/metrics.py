"""Metrics with OpenTelemetry Python's instrument names (CONTRACT §8), recorded by lens's C++ library.

    counter = handle.meter.create_counter("trainer.samples", unit="{sample}", description="Samples seen.")
    counter.add(32, {"phase": "train"})
    handle.meter.create_histogram("trainer.step_ms", unit="ms").record(412.5)

The same name gives the same instrument; a name taken by another kind raises ValueError. Measurements are kept only
on an exporting rank with metrics on; elsewhere a call returns at once.

Observable instruments (create_observable_counter/_up_down_counter/_gauge) take OpenTelemetry's callbacks: each
returns an iterable of observations (objects with .value and .attributes, as opentelemetry.metrics.Observation).
A daemon thread calls them once per metric export interval, never the training thread; a callback that raises is
counted (observable_callback_errors()) and the others still run. An observable counter's observations are totals:
lens records their increase.
"""

import logging
import threading
import time

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


class _CallbackOptions:
    """What a callback is given (OpenTelemetry's CallbackOptions)."""
    __slots__ = ("timeout_millis",)

    def __init__(self, timeout_millis):
        self.timeout_millis = timeout_millis


class _Observable(_Instrument):
    """An instrument whose values come from callbacks, called by the observer thread."""
    __slots__ = ("_callbacks", "_totals", "_kind")

    def __init__(self, kind, name, unit, description, callbacks):
        recorded_as = _Kind.GAUGE if kind == _Kind.GAUGE else _Kind.UP_DOWN_COUNTER if kind == _Kind.UP_DOWN_COUNTER \
            else _Kind.COUNTER
        super().__init__(recorded_as, name, unit, description)
        self._kind = kind
        self._callbacks = list(callbacks or ())
        for callback in self._callbacks:
            if not callable(callback):
                raise TypeError(f"observable instrument {name!r}: a callback is callable, "
                                f"not {type(callback).__name__}")
        self._totals = {}  # a counter's last total per attribute set, for the increase since
        _observer.add(self)

    def observe(self, options):
        for callback in self._callbacks:
            try:
                observations = list(callback(options) or ())
            except Exception:  # noqa: BLE001: one failing callback must not stop the others
                _observer.errors += 1
                logging.getLogger("lens").warning("lens: the callback of %s raised", self.name, exc_info=True)
                continue
            for observation in observations:
                self._record(getattr(observation, "value", None), getattr(observation, "attributes", None))

    def _record(self, value, attributes):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _observer.errors += 1
            return
        if self._kind == _Kind.GAUGE:
            self._native._measure(value, attributes)
            return
        key = tuple(sorted((attributes or {}).items()))
        last = self._totals.get(key)
        self._totals[key] = value
        increase = value if last is None else value - last
        if increase != 0:
            self._native._measure(increase, attributes)


class _Observer:
    """The daemon thread that calls observable instruments' callbacks, once per metric export interval."""

    def __init__(self):
        self._instruments = []
        self._lock = threading.Lock()
        self._thread = None
        self.errors = 0

    def add(self, instrument):
        with self._lock:
            self._instruments.append(instrument)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lens-metric-callbacks", daemon=True)
                self._thread.start()

    def observe_all(self):
        interval_ms = _interval_ms()
        with self._lock:
            instruments = list(self._instruments)
        for instrument in instruments:
            instrument.observe(_CallbackOptions(interval_ms))

    def _run(self):
        while True:
            time.sleep(_interval_ms() / 1000.0)
            self.observe_all()


def _interval_ms():
    from lens.telemetry import live_handle
    handle = live_handle()
    interval = handle.config.metric_export_interval_ms if handle is not None else 10000
    return max(10, int(interval))


_observer = _Observer()


def observe_now():
    """Calls every observable instrument's callbacks now, on the calling thread (tests; before a flush)."""
    _observer.observe_all()


def observable_callback_errors():
    """How many times a callback raised or gave a value that is not a number."""
    return _observer.errors


class Meter:
    """lens's one meter: instruments are the process's, whatever meter creates them (its name, version and scope
    are not kept: lens has one instrumentation scope per process)."""

    def __init__(self, name="lens", version=None, schema_url=None, attributes=None):
        self.name = name

    def create_counter(self, name, unit="", description=""):
        return Counter(_Kind.COUNTER, name, unit, description)

    def create_up_down_counter(self, name, unit="", description=""):
        return UpDownCounter(_Kind.UP_DOWN_COUNTER, name, unit, description)

    def create_histogram(self, name, unit="", description="", explicit_bucket_boundaries_advisory=None):
        bounds = list(explicit_bucket_boundaries_advisory) if explicit_bucket_boundaries_advisory else None
        return Histogram(_Kind.HISTOGRAM, name, unit, description, bounds)

    def create_gauge(self, name, unit="", description=""):
        return Gauge(_Kind.GAUGE, name, unit, description)

    def create_observable_counter(self, name, callbacks=None, unit="", description=""):
        return _Observable(_Kind.COUNTER, name, unit, description, callbacks)

    def create_observable_up_down_counter(self, name, callbacks=None, unit="", description=""):
        return _Observable(_Kind.UP_DOWN_COUNTER, name, unit, description, callbacks)

    def create_observable_gauge(self, name, callbacks=None, unit="", description=""):
        return _Observable(_Kind.GAUGE, name, unit, description, callbacks)
