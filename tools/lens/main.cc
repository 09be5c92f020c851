// lens: tools that read a run's telemetry files with no server (CONTRACT §10).
//
//   lens report RUN_DIR [--json] [--steps A-B]
//
// RUN_DIR is what a run wrote (<FILE_DIR>/<run id>/rank<R>.*.jsonl), a directory above it, or one file; files an
// OpenTelemetry Collector's file exporter wrote are read alike, plain or .gz. Exit codes: 0 read and reported;
// 2 bad input (nothing to read, no span in it, a malformed --steps).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "report.h"
#include "run_reader.h"

namespace {

constexpr int kBadInput = 2;

lens_tools::StepRange parse_steps(const std::string& text) {
  lens_tools::StepRange range;
  if (text.empty()) return range;
  const auto dash = text.find('-');
  try {
    std::size_t used = 0;
    range.first = std::stoll(text.substr(0, dash), &used);
    if (used != (dash == std::string::npos ? text.size() : dash)) throw std::invalid_argument(text);
    range.last = range.first;
    if (dash != std::string::npos) {
      range.last = std::stoll(text.substr(dash + 1), &used);
      if (used != text.size() - dash - 1) throw std::invalid_argument(text);
    }
  } catch (const std::exception&) {
    throw CLI::ValidationError("--steps", "'" + text + "' is not A-B or A (iterations, e.g. 10-20)");
  }
  if (range.first > range.last) throw CLI::ValidationError("--steps", "'" + text + "': A is after B");
  return range;
}

// Progress on stderr once a read takes longer than a second: a line rewritten in place on a terminal, a line a
// second otherwise.
class Progress {
 public:
  void operator()(std::uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, terminal_ ? "\rlens: read %.1f MB" : "lens: read %.1f MB\n", static_cast<double>(bytes) / 1e6);
  }
  ~Progress() {
    if (shown_ && terminal_) std::fprintf(stderr, "\n");
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  bool terminal_ = isatty(2) != 0, shown_ = false;
};

int report(const std::string& run_dir, bool json, const std::string& steps) {
  const std::vector<std::string> files = lens_tools::telemetry_files(run_dir);
  if (files.empty()) {
    std::fprintf(stderr, "lens report: no telemetry files (*.jsonl, *.jsonl.gz) under %s\n", run_dir.c_str());
    return kBadInput;
  }
  lens_tools::Report r(parse_steps(steps));
  Progress progress;
  const lens_tools::ReadStats read = lens_tools::read_run(files, r, std::ref(progress));
  const nlohmann::json figures = r.figures(read);
  for (const auto& p : read.problems)
    std::fprintf(stderr, "lens report: %s:%llu: %s\n", p.file.c_str(), static_cast<unsigned long long>(p.line),
                 p.what.c_str());
  if (json) {
    std::cout << figures.dump(2) << "\n";
  } else {
    std::cout << lens_tools::render_text(figures);
  }
  if (read.spans == 0) {
    std::fprintf(stderr, "lens report: no span in %zu files under %s\n", files.size(), run_dir.c_str());
    return kBadInput;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lens: read a training run's telemetry files (OTLP/JSON Lines, plain or .gz) with no server"};
  app.require_subcommand(1);
  std::string run_dir, steps;
  bool json = false;
  CLI::App* rep = app.add_subcommand(
      "report",
      "What a person asks first about a run: who wrote it; per span name, count and p50/p90/p99/max over all "
      "ranks; step time per iteration (median and max over ranks, the slowest rank); the training loss; what was "
      "lost. Exit 0, or 2 for bad input (nothing to read, no span).");
  rep->add_option("RUN_DIR", run_dir,
                  "A run's directory (<FILE_DIR>/<run id>), a directory above runs, or one file; Collector file "
                  "exporter output too")
      ->required();
  rep->add_flag("--json", json, "The figures as JSON, for scripts and CI");
  rep->add_option("--steps", steps, "Only these iterations in the step table: A-B or A");
  try {
    app.parse(argc, argv);
    return report(run_dir, json, steps);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kBadInput;
  }
}
