// lens's spans to an OpenTelemetry SDK SpanExporter given to setup (setup_telemetry(span_exporter=...)): each batch
// becomes the SDK's ReadableSpans, built here from lens's records (lens/internal/span_batch.h) on the pipeline's
// background thread, the GIL taken once per batch, then goes to the exporter's export(). No OTLP/JSON between:
// parsing it and building the objects in Python is ten times slower, slower than one training thread makes spans
// (docs/PERFORMANCE.md has the figures).
#pragma once

#include <Python.h>

#include <functional>

namespace lens::internal {
struct ExportBatch;
}

namespace lens_python {

// The batch sink of a kit (lens.sdk_exporters.SpanKit: the exporter and the SDK classes to build with); the kit is
// kept for the process's life, as the pipeline may outlive the handle. Returns false for a failed export: the
// exporter's result is not SUCCESS, it raised (said once on stderr), or the interpreter is ending.
std::function<bool(const lens::internal::ExportBatch&)> sdk_span_sink(PyObject* kit);

}  // namespace lens_python
