"""The test pattern of Megatron-LM's contributor docs: a global SDK TracerProvider with an InMemorySpanExporter, the
groups enabled with set_enabled_span_groups, and no setup_telemetry: the helpers record through the global
provider."""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capture import note, report_spans
from nemo.lens.helpers import managed_span, span_cm, trace_fn
from nemo.lens.state import set_enabled_span_groups

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
set_enabled_span_groups(frozenset({"step", "forward_backward"}))


@trace_fn("forward_backward", "new.fn")
def new_function():
    return 1


with span_cm("new.top"):
    with managed_span("step", "new.step", n=1):
        new_function()
    with managed_span("optimizer", "new.off"):  # not enabled
        pass
note("captured", [s.name for s in exporter.get_finished_spans()])
report_spans(exporter.get_finished_spans())
