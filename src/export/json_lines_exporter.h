// The exporters that write OTLP/JSON lines: `console` (stdout) and `file` (one JSON Lines file per signal and
// rank, the demo's default), and where the file exporter puts a run's files.
#pragma once

#include <memory>
#include <string>

#include "lens/config.h"
#include "signals/exporter.h"

namespace lens::internal {

// One compact OTLP/JSON request per line on stdout.
std::unique_ptr<TelemetryExporter> make_console_exporter();

// OTLP/JSON Lines appended to `<prefix>.traces.jsonl`, `.metrics.jsonl`, `.logs.jsonl`, one request per line,
// each line written whole. Creates the directories and opens the files of `signals` now; throws ConfigError
// when one cannot be opened.
std::unique_ptr<TelemetryExporter> make_file_exporter(const std::string& prefix, SignalSet signals);

// `<file_dir>/<run_id>/rank<R>`
// The run's directory name: the run id with every byte outside [A-Za-z0-9._-], and a leading '.', written as %XX,
// so that an id from the launcher ("../x", "/abs", "a/b") is always one path component inside FILE_DIR.
std::string run_directory_name(const std::string& run_id);
std::string telemetry_file_prefix(const Config& config, const std::string& run_id, int rank);

}  // namespace lens::internal
