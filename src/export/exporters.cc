#include "export/exporters.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "export/otlp_exporter.h"
#include "export/otlp_json.h"

namespace lens::internal {

namespace {

// Encodes each batch as one OTLP/JSON line and hands the line to `write`: what console and file share.
template <typename Sink>
class JsonLinesExporter final : public TelemetryExporter {
 public:
  explicit JsonLinesExporter(Sink sink) : sink_(std::move(sink)) {}
  ExportResult export_spans(const ExportBatch& batch, Deadline) override {
    return write(Signal::kTraces, [&] { encode_traces_json(batch, line_); });
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline) override {
    return write(Signal::kMetrics, [&] { encode_metrics_json(batch, line_); });
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline) override {
    return write(Signal::kLogs, [&] { encode_logs_json(batch, line_); });
  }
  void shutdown() override { sink_.close(); }

 private:
  template <typename Encode>
  ExportResult write(Signal signal, Encode&& encode) {
    line_.clear();
    encode();
    line_ += '\n';
    return sink_.write(signal, line_) ? ExportResult::kSuccess : ExportResult::kFailure;
  }

  Sink sink_;
  std::string line_;
};

struct StdoutSink {
  // One fwrite under stdout's lock: a line is never interleaved with the program's own output.
  bool write(Signal, const std::string& line) {
    return std::fwrite(line.data(), 1, line.size(), stdout) == line.size() && std::fflush(stdout) == 0;
  }
  void close() {}
};

// One O_APPEND file per signal, each line written with whole writes: a reader sees whole lines; only a crash
// inside a write can leave a truncated last line, which readers skip.
struct FileSink {
  std::string paths[3];
  int fds[3] = {-1, -1, -1};

  bool write(Signal signal, const std::string& line) {
    int fd = fds[static_cast<int>(signal)];
    const char* at = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      ssize_t n = fd < 0 ? -1 : ::write(fd, at, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        log_warning("cannot write telemetry to %s: %s", paths[static_cast<int>(signal)].c_str(),
                    fd < 0 ? "not open" : std::strerror(errno));
        return false;
      }
      at += n;
      left -= static_cast<std::size_t>(n);
    }
    return true;
  }
  void close() {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
};

}  // namespace

std::unique_ptr<TelemetryExporter> make_console_exporter() {
  return std::make_unique<JsonLinesExporter<StdoutSink>>(StdoutSink{});
}

std::unique_ptr<TelemetryExporter> make_file_exporter(const std::string& prefix, SignalSet signals) {
  FileSink sink;
  static constexpr const char* kSuffix[] = {".traces.jsonl", ".metrics.jsonl", ".logs.jsonl"};
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(prefix).parent_path(), error);
  for (int k = 0; k < 3; ++k) {
    sink.paths[k] = prefix + kSuffix[k];
    if (!signals[k]) continue;
    sink.fds[k] = ::open(sink.paths[k].c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sink.fds[k] < 0) {
      std::string reason = std::strerror(errno);
      sink.close();
      throw ConfigError("lens: cannot open the telemetry file " + sink.paths[k] + ": " + reason +
                        (error ? " (creating its directory: " + error.message() + ")" : std::string()) +
                        "; set <PREFIX>_FILE_DIR to a writable directory");
    }
  }
  return std::make_unique<JsonLinesExporter<FileSink>>(std::move(sink));
}

std::string telemetry_file_prefix(const Config& config, const std::string& run_id, int rank) {
  return (std::filesystem::path(config.file_dir) / run_id / ("rank" + std::to_string(rank))).string();
}

std::unique_ptr<TelemetryExporter> make_exporter(const Config& config, const std::string& run_id, int rank,
                                                 SignalSet signals) {
  switch (config.exporter) {
    case Exporter::kConsole: return make_console_exporter();
    case Exporter::kFile: return make_file_exporter(telemetry_file_prefix(config, run_id, rank), signals);
    case Exporter::kOtlp: return make_otlp_exporter(config);
  }
  throw ConfigError("lens: unknown exporter");
}

}  // namespace lens::internal
