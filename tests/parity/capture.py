"""Runs one parity scenario under whichever implementation `nemo.lens` is in this interpreter (the real NeMo Lens, or
lens through its installed .pth hook) and writes what it exported as JSON, in a form both can be compared in.

    capture.py SCENARIO.py OUT.json

Every setup_telemetry of the scenario is handed the OpenTelemetry SDK's InMemorySpanExporter and
InMemoryMetricReader (both implementations take them: NeMo Lens builds its providers on them, lens exports its
spans and metrics to them from its export thread), so the two are compared on the same SDK objects. A scenario may
set its own global TracerProvider instead (the documented test pattern) and report its spans with `report_spans`."""

import glob
import json
import os
import runpy
import shutil
import sys
import tempfile

from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS = InMemorySpanExporter()
METRICS = InMemoryMetricReader()
LOGS = InMemoryLogExporter()
LENS_LOG_DIR = tempfile.mkdtemp(prefix="parity-logs-")
_extra_spans = []
_notes = {}


def report_spans(spans):
    """For a scenario that captured spans itself (its own provider): they are compared as the harness's are."""
    _extra_spans.extend(spans)


def note(key, value):
    """A value the scenario observed (what a call returned, whether a span was None), compared as it is."""
    _notes[key] = value


def _patched_setup():
    import nemo.lens
    import nemo.lens.handle

    real = nemo.lens.setup_telemetry

    def setup_telemetry(config, *args, **kwargs):
        kwargs.setdefault("span_exporter", SPANS)
        kwargs.setdefault("metric_reader", METRICS)
        handle = real(config, *args, **kwargs)
        from opentelemetry._logs import get_logger_provider
        provider = get_logger_provider()  # NeMo Lens's is the SDK's: the records are read as it exports them
        if hasattr(provider, "add_log_record_processor"):
            provider.add_log_record_processor(SimpleLogRecordProcessor(LOGS))
        return handle

    if nemo.lens.__name__ == "lens":  # lens's logs go to its file exporter (spans and metrics: the SDK objects)
        os.environ.update(NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=LENS_LOG_DIR)
    else:  # NeMo Lens's log exporter is OTLP or console: console, as nothing listens for OTLP here
        os.environ["NEMO_LENS_EXPORTER"] = "console"

    nemo.lens.setup_telemetry = setup_telemetry
    nemo.lens.handle.setup_telemetry = setup_telemetry


def _span_form(span, names_by_id):
    context = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "parent": None if parent is None else names_by_id.get(parent.span_id, "(remote)"),
        "attributes": dict(span.attributes or {}),
        "status": [span.status.status_code.name, span.status.description],
        "events": [[e.name, dict(e.attributes or {})] for e in span.events],
        "links": [[names_by_id.get(link.context.span_id, "(remote)"), dict(link.attributes or {})]
                  for link in span.links],
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "sampled": context.trace_flags.sampled,
        "resource": dict(span.resource.attributes) if span.resource is not None else {},
    }


def _log_forms(names_by_id):
    """Every log record exported, in order: severity, body, attributes, and the span it was logged in (by name)."""
    forms = []
    for exported in LOGS.get_finished_logs():  # NeMo Lens's
        record = getattr(exported, "log_record", exported)
        forms.append({"severity": [int(record.severity_number.value), record.severity_text], "body": record.body,
                      "attributes": dict(record.attributes or {}), "span": names_by_id.get(record.span_id)})
    for path in sorted(glob.glob(os.path.join(LENS_LOG_DIR, "*", "*.logs.jsonl"))):  # lens's OTLP/JSON
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                for resource_logs in json.loads(line)["resourceLogs"]:
                    for scope in resource_logs["scopeLogs"]:
                        forms.extend(_otlp_json_log_form(r, names_by_id) for r in scope["logRecords"])
    return forms


def _otlp_json_value(value):
    kind, raw = next(iter(value.items()))
    return int(raw) if kind == "intValue" else raw


def _otlp_json_log_form(record, names_by_id):
    span_id = int(record["spanId"], 16) if record.get("spanId") else None
    return {"severity": [record.get("severityNumber", 0), record.get("severityText", "")],
            "body": _otlp_json_value(record["body"]) if "body" in record else None,
            "attributes": {a["key"]: _otlp_json_value(a["value"]) for a in record.get("attributes", [])},
            "span": names_by_id.get(span_id)}


def _metric_forms():
    """What the metric reader holds after the scenario, by metric name: kind, unit, description, and each point's
    attributes with its value (sum, count, min, max for a histogram)."""
    data = METRICS.get_metrics_data()
    forms = {}
    for resource_metrics in (data.resource_metrics if data is not None else ()):
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points = []
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = {"sum": point.sum, "count": point.count, "min": point.min, "max": point.max}
                    points.append([dict(point.attributes or {}), value])
                forms[metric.name] = {"kind": type(metric.data).__name__, "unit": metric.unit,
                                      "description": metric.description,
                                      "points": sorted(points, key=lambda p: json.dumps(p[0], sort_keys=True))}
    return forms


def main():
    scenario, out = sys.argv[1], sys.argv[2]
    sys.argv = [scenario]
    sys.modules["capture"] = sys.modules[__name__]  # `from capture import note` in a scenario
    _patched_setup()
    runpy.run_path(scenario, run_name="__main__")
    spans = list(SPANS.get_finished_spans()) + _extra_spans
    names_by_id = {s.get_span_context().span_id: s.name for s in spans}
    import nemo.lens
    result = {
        "implementation": "lens" if nemo.lens.__name__ == "lens" else "nemo-lens",
        "spans": [_span_form(s, names_by_id) for s in spans],
        "notes": _notes,
        "metrics": _metric_forms(),
        "logs": _log_forms(names_by_id),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=repr)
    shutil.rmtree(LENS_LOG_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
