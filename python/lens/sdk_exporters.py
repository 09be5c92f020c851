"""OpenTelemetry SDK exporters fed from lens's pipeline (setup_telemetry's span_exporter and metric_reader, as NeMo
Lens accepts them).

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    handle = setup_telemetry(config, span_exporter=InMemorySpanExporter(),
                             metric_reader=PeriodicExportingMetricReader(ConsoleMetricExporter()))

lens records as always (its span path, its instruments). Its background thread hands each batch of spans to the
exporter as the SDK's ReadableSpans, built by lens's native code from its records with the GIL taken once a batch
(SpanKit names the SDK classes it builds with), and each batch of metrics, as OTLP/JSON, to MetricFeed, which makes
the SDK's MetricsData: never on the training thread. A span_exporter replaces the configured traces exporter, a
metric_reader the configured metrics exporter, as in NeMo Lens. What the exporter returns or raises is lens's export
result: a failure is counted (span_stats()["dropped_export_failed"]) and the next batch goes to it again. A
metric_reader collects lens's newest metrics (its own thread, or its caller's, decides when): lens takes the place
of the SDK's MeterProvider for it.

Needs opentelemetry-sdk, which a caller passing its objects has.
"""

import json
import threading

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics.export import (AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric,
                                              MetricsData, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TraceFlags


def _value(any_value):
    """A Python value of an OTLP/JSON AnyValue."""
    kind, raw = next(iter(any_value.items())) if any_value else ("stringValue", "")
    if kind == "intValue":
        return int(raw)
    if kind == "doubleValue":
        return float(raw)
    if kind == "arrayValue":
        return tuple(_value(v) for v in raw.get("values", []))
    return raw


def _attributes(item):
    return {kv["key"]: _value(kv.get("value", {})) for kv in item.get("attributes", [])}


def _scope(scope):
    return InstrumentationScope(scope.get("name", ""), scope.get("version") or None)


class SpanKit:
    """What lens's native bridge builds each batch of ReadableSpans with, and the exporter it hands them to."""

    ReadableSpan, SpanContext, TraceFlags, Event, Link = ReadableSpan, otel_trace.SpanContext, TraceFlags, Event, Link
    Resource, Status, InstrumentationScope = Resource, Status, InstrumentationScope
    STATUS_CODES = (StatusCode.UNSET, StatusCode.OK, StatusCode.ERROR)  # OTLP's status codes 0..2
    SPAN_KINDS = (SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER)  # 1..5
    SUCCESS = SpanExportResult.SUCCESS

    # ReadableSpan's parameters, in the order the bridge passes them.
    READABLE_SPAN_PARAMETERS = ("name", "context", "parent", "resource", "attributes", "events", "links", "kind",
                                "status", "start_time", "end_time", "instrumentation_scope")

    def __init__(self, exporter):
        self.exporter = exporter
        self.TUPLE_TRACE_STATE = _span_context_tuple_trace_state()
        self.READABLE_SPAN_FIELDS = _readable_span_fields(self.READABLE_SPAN_PARAMETERS)


def _readable_span_fields(parameters):
    """The attribute each of `parameters` becomes, when ReadableSpan's __init__ only stores its arguments (and
    instrumentation_info, as None): the bridge then sets them on an object it makes without running __init__ (that
    call is half of a span's cost). None where __init__ does anything else."""
    given = {name: object() for name in parameters}
    try:
        made = vars(ReadableSpan(**given))
    except Exception:  # noqa: BLE001: another ReadableSpan: __init__ makes them
        return None
    stored = {id(value): key for key, value in made.items() if value is not None}
    leftover = {key for key, value in made.items() if value is None}
    if len(stored) != len(parameters) or leftover != {"_instrumentation_info"}:
        return None
    fields = tuple(stored.get(id(given[name])) for name in parameters)
    return fields + ("_instrumentation_info",) if None not in fields else None


def _span_context_tuple_trace_state():
    """The trace state a SpanContext gets by default, when SpanContext is the tuple (trace_id, span_id, is_remote,
    trace_flags, trace_state, is_valid) its __new__ makes: the bridge then makes each with tuple.__new__, skipping
    checks that lens's ids never fail (about half of a SpanContext's cost). None where the SDK makes it otherwise."""
    made = otel_trace.SpanContext(1, 2, False, TraceFlags(1))
    try:
        direct = tuple.__new__(otel_trace.SpanContext, (1, 2, False, TraceFlags(1), made.trace_state, True))
        same = (direct == made and (direct.trace_id, direct.span_id, direct.is_remote, direct.trace_flags,
                                    direct.trace_state, direct.is_valid) == (1, 2, False, 1, made.trace_state, True))
    except Exception:  # noqa: BLE001: a SpanContext of another shape: the class itself makes them
        same = False
    return made.trace_state if same else None


def _number_points(metric_data):
    return [NumberDataPoint(_attributes(p), int(p.get("startTimeUnixNano", 0)), int(p["timeUnixNano"]),
                            int(p["asInt"]) if "asInt" in p else float(p.get("asDouble", 0.0)))
            for p in metric_data.get("dataPoints", [])]


def _histogram_points(metric_data):
    return [HistogramDataPoint(_attributes(p), int(p.get("startTimeUnixNano", 0)), int(p["timeUnixNano"]),
                               int(p.get("count", 0)), float(p.get("sum", 0.0)),
                               [int(c) for c in p.get("bucketCounts", [])],
                               [float(b) for b in p.get("explicitBounds", [])],
                               float(p.get("min", 0.0)), float(p.get("max", 0.0)))
            for p in metric_data.get("dataPoints", [])]


def _metric(m):
    temporality = lambda data: AggregationTemporality(int(data.get("aggregationTemporality", 2)))  # noqa: E731
    if "sum" in m:
        data = Sum(_number_points(m["sum"]), temporality(m["sum"]), bool(m["sum"].get("isMonotonic", False)))
    elif "gauge" in m:
        data = Gauge(_number_points(m["gauge"]))
    elif "histogram" in m:
        data = Histogram(_histogram_points(m["histogram"]), temporality(m["histogram"]))
    else:
        return None
    return Metric(m["name"], m.get("description", ""), m.get("unit", ""), data)


def metrics_data(otlp_json):
    """The SDK's MetricsData of one OTLP/JSON ExportMetricsServiceRequest."""
    resource_metrics = []
    for rm in json.loads(otlp_json).get("resourceMetrics", []):
        scopes = []
        for sm in rm.get("scopeMetrics", []):
            metrics = [metric for metric in (_metric(m) for m in sm.get("metrics", [])) if metric is not None]
            scopes.append(ScopeMetrics(_scope(sm.get("scope", {})), metrics, sm.get("schemaUrl", "")))
        resource_metrics.append(ResourceMetrics(Resource(_attributes(rm.get("resource", {}))), scopes,
                                                rm.get("schemaUrl", "")))
    return MetricsData(resource_metrics)


class MetricFeed:
    """Keeps lens's newest metrics for a metric_reader, which collects them as from its MeterProvider."""

    def __init__(self, reader):
        self._lock = threading.Lock()
        self._newest = MetricsData([])
        reader._set_collect_callback(self._collect)  # the SDK's MeterProvider does the same with its readers

    def sink(self, otlp_json):
        data = metrics_data(otlp_json)
        with self._lock:
            self._newest = data
        return True

    def _collect(self, reader, timeout_millis=10_000):
        with self._lock:
            return self._newest
