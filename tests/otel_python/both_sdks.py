"""One Python process that uses lens and the OpenTelemetry Python SDK at once (run by otel_python_test.py with
.venv's interpreter, which has the SDK, and lens from the build on PYTHONPATH).

    both_sdks.py ITERATIONS LENS_PROTOCOL OTEL_PROTOCOL COLLECTOR_GRPC_PORT COLLECTOR_HTTP_PORT

Each iteration nests a lens span and an OpenTelemetry span inside each other, both ways, with attributes; each SDK
exports over OTLP to the same Collector. Prints one JSON line: what each SDK says it exported."""

import json
import os
import sys

iterations, lens_protocol, otel_protocol, grpc_port, http_port = sys.argv[1:6]
iterations = int(iterations)
url = {"grpc": f"http://127.0.0.1:{grpc_port}", "http/protobuf": f"http://127.0.0.1:{http_port}"}

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_EXPORTER="otlp",
                  NEMO_LENS_HANG_SIGNAL="none", OTEL_SERVICE_NAME="lens-side", OTEL_BSP_SCHEDULE_DELAY="100",
                  OTEL_EXPORTER_OTLP_PROTOCOL=lens_protocol, OTEL_EXPORTER_OTLP_ENDPOINT=url[lens_protocol])

import lens  # noqa: E402  (after the environment it reads)
from lens.helpers import managed_span  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

if otel_protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    exporter = OTLPSpanExporter(endpoint=url["grpc"], insecure=True)
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    exporter = OTLPSpanExporter(endpoint=url["http/protobuf"] + "/v1/traces")

# The SDK's own provider, not the global one's environment: its service name is its own.
provider = TracerProvider(resource=Resource.create({"service.name": "otel-side"}))
provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
otel = provider.get_tracer("both_sdks")

handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1)
for i in range(iterations):
    with managed_span(lens.SpanGroup.STEP, "lens.outer", iteration=i):
        with otel.start_as_current_span("otel.inner", attributes={"iteration": i}):
            with managed_span(lens.SpanGroup.JOB, "lens.innermost", iteration=i):
                pass
    with otel.start_as_current_span("otel.outer", attributes={"iteration": i}):
        with managed_span(lens.SpanGroup.STEP, "lens.inside_otel", iteration=i):
            pass
handle.shutdown()
flushed = provider.force_flush(30000)
provider.shutdown()
print(json.dumps({"lens": handle.span_stats(), "otel_flushed": flushed}))
