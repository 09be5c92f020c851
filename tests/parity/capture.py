"""Runs one parity scenario under whichever implementation `nemo.lens` is in this interpreter (the real NeMo Lens, or
lens through its installed .pth hook) and writes what it exported as JSON, in a form both can be compared in.

    capture.py SCENARIO.py OUT.json

Every setup_telemetry of the scenario is handed the OpenTelemetry SDK's InMemorySpanExporter and
InMemoryMetricReader (both implementations take them: NeMo Lens builds its providers on them, lens exports its
spans and metrics to them from its export thread), so the two are compared on the same SDK objects. A scenario may
set its own global TracerProvider instead (the documented test pattern) and report its spans with `report_spans`."""

import json
import runpy
import sys

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS = InMemorySpanExporter()
METRICS = InMemoryMetricReader()
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
        return real(config, *args, **kwargs)

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
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=repr)


if __name__ == "__main__":
    main()
