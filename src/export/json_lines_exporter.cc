#include "export/json_lines_exporter.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/files.h"
#include "common/log.h"
#include "common/text.h"
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

// One O_APPEND file per signal (0600, never through a symlink), each line written with whole writes: a reader
// sees whole lines. A line is never extended by another: a file that ends in a torn line (a write cut by a full
// disk or a SIGKILL, here or in an earlier process appending to the same file) gets a newline before the next
// line, so the torn one stays a line of its own that readers skip, and its batch was counted as failed. A file
// deleted while the run goes on is made again, with a warning, instead of swallowing lines.
struct FileSink {
  std::string paths[3];
  int fds[3] = {-1, -1, -1};
  bool torn[3] = {false, false, false};  // the file's last line is not complete

  void open(int k) {
    fds[k] = ::open(paths[k].c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fds[k] >= 0) torn[k] = ends_torn(k);
  }
  // Whether the file's last byte is not a newline, read through a separate descriptor (an O_APPEND one cannot
  // pread portably).
  bool ends_torn(int k) const {
    int reader = ::open(paths[k].c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (reader < 0) return false;
    struct stat st {};
    char last = '\n';
    if (::fstat(reader, &st) == 0 && st.st_size > 0) (void)::pread(reader, &last, 1, st.st_size - 1);
    ::close(reader);
    return last != '\n';
  }
  bool deleted(int fd) const {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_nlink == 0;
  }

  bool write(Signal signal, const std::string& line) {
    int k = static_cast<int>(signal);
    if (fds[k] >= 0 && deleted(fds[k])) {
      log_warning("the telemetry file %s was deleted while the run went on; writing it anew", paths[k].c_str());
      ::close(fds[k]);
      open(k);
    }
    if (torn[k] && !write_all(k, "\n", 1)) return false;
    torn[k] = false;
    std::size_t written = 0;
    bool whole = write_all(k, line.data(), line.size(), &written);
    torn[k] = written > 0 && !whole;
    return whole;
  }
  bool write_all(int k, const char* at, std::size_t left, std::size_t* written = nullptr) {
    while (left > 0) {
      ssize_t n = fds[k] < 0 ? -1 : ::write(fds[k], at, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        log_warning("cannot write telemetry to %s: %s", paths[k].c_str(),
                    fds[k] < 0 ? "not open" : std::strerror(errno));
        return false;
      }
      at += n;
      left -= static_cast<std::size_t>(n);
      if (written) *written += static_cast<std::size_t>(n);
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
  std::filesystem::path run_directory = std::filesystem::path(prefix).parent_path();
  if (std::error_code error = make_private_directories(run_directory)) {
    throw ConfigError(
        "lens: cannot make the telemetry directory " + run_directory.string() + ": " +
        (error == std::errc::not_a_directory ? "a file or symbolic link is in its place" : error.message()) +
        "; set <PREFIX>_FILE_DIR to a writable directory");
  }
  for (int k = 0; k < 3; ++k) {
    sink.paths[k] = prefix + kSuffix[k];
    if (!signals[k]) continue;
    sink.open(k);
    if (sink.fds[k] < 0) {
      std::string reason = errno == ELOOP ? "it is a symbolic link, which lens does not follow" : std::strerror(errno);
      sink.close();
      throw ConfigError("lens: cannot open the telemetry file " + sink.paths[k] + ": " + reason +
                        "; set <PREFIX>_FILE_DIR to a writable directory");
    }
  }
  return std::make_unique<JsonLinesExporter<FileSink>>(std::move(sink));
}

std::string run_directory_name(const std::string& run_id) {
  std::string out =
      percent_encode(run_id, [](unsigned char c) { return !(std::isalnum(c) || c == '_' || c == '-' || c == '.'); });
  if (out.empty()) out = "%00";
  if (out.front() == '.') out.replace(0, 1, "%2E");  // never "." or "..", never hidden
  if (out.size() > 200) {
    throw ConfigError("lens: the run id is too long to name a directory (" + std::to_string(run_id.size()) +
                      " bytes); set <PREFIX>_RUN_ID to a shorter one");
  }
  return out;
}

std::string telemetry_file_prefix(const Config& config, const std::string& run_id, int rank) {
  return (std::filesystem::path(config.file_dir) / run_directory_name(run_id) / ("rank" + std::to_string(rank)))
      .string();
}

}  // namespace lens::internal
