#include "export/exporters.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "export/otlp_json.h"

namespace lens::internal {

namespace {

class ConsoleExporter final : public SpanExporter {
 public:
  ExportResult export_spans(const ExportBatch& batch, Deadline) override {
    line_.clear();
    encode_traces_json(batch, line_);
    line_ += '\n';
    // One fwrite under stdout's lock: the line is never interleaved with the program's own output.
    bool ok = std::fwrite(line_.data(), 1, line_.size(), stdout) == line_.size() && std::fflush(stdout) == 0;
    return ok ? ExportResult::kSuccess : ExportResult::kFailure;
  }

 private:
  std::string line_;
};

class FileExporter final : public SpanExporter {
 public:
  FileExporter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~FileExporter() override { shutdown(); }

  ExportResult export_spans(const ExportBatch& batch, Deadline) override {
    if (fd_ < 0) return ExportResult::kFailure;
    line_.clear();
    encode_traces_json(batch, line_);
    line_ += '\n';
    // O_APPEND and one write per line: a reader sees whole lines; only a crash inside this write can leave a
    // truncated last line, which readers skip.
    const char* at = line_.data();
    std::size_t left = line_.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, at, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        log_warning("cannot write spans to %s: %s", path_.c_str(), std::strerror(errno));
        return ExportResult::kFailure;
      }
      at += n;
      left -= static_cast<std::size_t>(n);
    }
    return ExportResult::kSuccess;
  }

  void shutdown() override {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_;
  std::string line_;
};

}  // namespace

std::unique_ptr<SpanExporter> make_console_exporter() { return std::make_unique<ConsoleExporter>(); }

std::unique_ptr<SpanExporter> make_file_exporter(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError("lens: cannot open the telemetry file " + path + ": " + std::strerror(errno) +
                      (error ? " (creating its directory: " + error.message() + ")" : std::string()) +
                      "; set <PREFIX>_FILE_DIR to a writable directory");
  }
  return std::make_unique<FileExporter>(path, fd);
}

std::string telemetry_file_path(const Config& config, const std::string& run_id, int rank, const char* signal) {
  return (std::filesystem::path(config.file_dir) / run_id / ("rank" + std::to_string(rank) + "." + signal + ".jsonl"))
      .string();
}

std::unique_ptr<SpanExporter> make_span_exporter(const Config& config, const std::string& run_id, int rank) {
  switch (config.exporter) {
    case Exporter::kConsole: return make_console_exporter();
    case Exporter::kFile: return make_file_exporter(telemetry_file_path(config, run_id, rank, "traces"));
    case Exporter::kOtlp: break;
  }
  throw ConfigError(
      "lens: the otlp exporter is not in this build yet; set <PREFIX>_EXPORTER=file (OTLP/JSON Lines under "
      "<PREFIX>_FILE_DIR) or console");
}

}  // namespace lens::internal
