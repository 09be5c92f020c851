// The span exporters of this layer and the choice among them (MYTRAINER_OTEL_EXPORTER).
#pragma once

#include <memory>
#include <string>

#include "export/exporter.h"
#include "lens/config.h"

namespace lens::internal {

// One compact OTLP/JSON request per line on stdout.
std::unique_ptr<SpanExporter> make_console_exporter();

// OTLP/JSON Lines appended to `path`, one request per line, each line written whole. Creates the directories;
// throws ConfigError when the file cannot be opened.
std::unique_ptr<SpanExporter> make_file_exporter(const std::string& path);

// `<file_dir>/<run_id>/rank<R>.<signal>.jsonl`
std::string telemetry_file_path(const Config& config, const std::string& run_id, int rank, const char* signal);

// The exporter the configuration asks for. Throws ConfigError for one this build cannot provide.
std::unique_ptr<SpanExporter> make_span_exporter(const Config& config, const std::string& run_id, int rank);

}  // namespace lens::internal
