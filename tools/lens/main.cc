// lens: tools that read a run's telemetry files with no server (CONTRACT §10).
//
//   lens report RUN_DIR... [--json] [--steps A-B] [--html FILE] [--fail-if COND]...
//   lens convert RUN_DIR... --to chrome-json -o FILE[.gz] [--steps A-B] [--merge PROFILER_TRACE [--merge-rank R]]
//   lens ctl RUN_DIR status | span-groups SPEC [--for N]
//   lens hang RUN_DIR... [--json]
//
// RUN_DIR is what a run wrote (<FILE_DIR>/<run id>/rank<R>.*.jsonl), a directory above it, or one file; several
// are read as one run (one directory per node, a Collector's rotated files); files an OpenTelemetry Collector's
// file exporter wrote are read alike, plain or .gz. Exit codes: 0 read and reported;
// 1 a --fail-if condition holds; 2 bad input (nothing to read, no span in it, a malformed option).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chrome_trace.h"
#include "common/text.h"
#include "ctl.h"
#include "hang.h"
#include "html.h"
#include "report.h"
#include "run_reader.h"
#include "text.h"

namespace {

constexpr int kFailed = 1;    // a --fail-if condition holds
constexpr int kBadInput = 2;  // nothing to read, no span, a malformed option, an unwritable output

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

// Every message lens writes to stderr: what it holds from outside (a path, a run id or a span name from a file, the
// text of an option) cannot send an escape sequence to the terminal or reorder what it shows (terminal_text).
__attribute__((format(printf, 1, 2))) void tell(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text(length > 0 ? static_cast<std::size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, again);
  va_end(again);
  std::fputs(lens::internal::terminal_text(text).c_str(), stderr);
}

// `--fail-if` conditions for CI: what a script can hold a run to.
struct FailIf {
  std::string text, what;
  double bound = 0;
};

FailIf parse_fail_if(const std::string& text) {
  FailIf f{text, text, 0};
  const auto gt = text.find('>');
  if (gt != std::string::npos) {
    f.what = text.substr(0, gt);
    try {
      std::size_t used = 0;
      f.bound = std::stod(text.substr(gt + 1), &used);
      // The whole rest, a finite number of at least 0 (a NaN bound would never hold).
      if (used != text.size() - gt - 1 || !std::isfinite(f.bound) || f.bound < 0) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      f.what.clear();
    }
  }
  const bool with_bound = f.what == "bubble" || f.what == "bubble-excess" || f.what == "dropped";
  const bool bare = gt == std::string::npos && (f.what == "straggler" || f.what == "problems");
  if (!(bare || (with_bound && gt != std::string::npos)))
    throw CLI::ValidationError("--fail-if", "'" + text +
                                                "' is not one of straggler, problems, bubble>PERCENT, "
                                                "bubble-excess>POINTS, dropped>N (a number of at least 0)");
  return f;
}

// Why `f` holds for `figures`, or empty. Throws std::runtime_error when the run cannot say (a gate that passes on a
// figure nobody measured would be a wrong answer): exit 2.
std::string failed(const FailIf& f, const lens_tools::Figures& figures) {
  const auto& stragglers = figures.stragglers;
  if (f.what == "straggler" && !stragglers.not_scored.empty())
    throw std::runtime_error("--fail-if " + f.text +
                             ": cannot decide, stragglers were not scored: " + stragglers.not_scored);
  if (f.what == "straggler" && !stragglers.named.empty())
    return "a straggler: rank " + std::to_string(stragglers.named.front().rank);
  if (f.what == "problems" && !figures.read.problems.empty())
    return std::to_string(figures.read.problems.size()) + " problems reading the files";
  if (f.what == "dropped" && figures.lost.spans_dropped > f.bound)
    return nlohmann::json(figures.lost.spans_dropped).dump() + " spans dropped";
  for (const lens_tools::BubbleRow& b : figures.bubble) {
    if ((f.what == "bubble" || f.what == "bubble-excess") && !b.measured)
      throw std::runtime_error("--fail-if " + f.text +
                               ": cannot decide, the bubble was not measured: " + b.not_measured);
    if (!b.measured) continue;
    const double measured = 100 * *b.measured;
    const double theory = b.theoretical ? 100 * *b.theoretical : measured;
    if ((f.what == "bubble" && measured > f.bound) || (f.what == "bubble-excess" && measured - theory > f.bound))
      return "stage " + std::to_string(b.stage) + "'s bubble is " + std::to_string(measured) + " % (theoretical " +
             std::to_string(theory) + " %)";
  }
  return {};
}

// The iterations an HTML timeline shows: those asked for (at most kMaxTimelineSteps, the first of them), else the
// last two of the run.
constexpr std::int64_t kMaxTimelineSteps = 8;
lens_tools::StepRange timeline_steps(const lens_tools::StepRange& asked,
                                     const std::vector<lens_tools::StepFigures>& steps) {
  if (steps.empty()) return {1, 0};  // nothing
  if (asked.first != 0 || asked.last != INT64_MAX) {
    const std::int64_t first = std::max(asked.first, steps.front().iteration);
    return {first, std::min(asked.last, first + kMaxTimelineSteps - 1)};
  }
  const std::int64_t last = steps.back().iteration;
  return {steps.size() >= 2 ? steps[steps.size() - 2].iteration : last, last};
}

lens_tools::Timeline read_timeline(const std::vector<std::string>& files,
                                   std::map<std::string, std::vector<lens_tools::StepWindow>> windows,
                                   const std::string& run, const lens_tools::ClockFigures& clocks, int threads) {
  lens_tools::Timeline timeline(std::move(windows), clocks);  // the report's offsets: estimated once
  Progress progress;
  lens_tools::read_run(files, timeline,
                       {.detail = true, .progress = std::ref(progress), .run_id = run, .threads = threads});
  timeline.lay_out();
  return timeline;
}

void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) throw std::runtime_error("cannot write " + path + " (is the disk full?)");
}

// Two runs' spans are never mixed into one figure: under a directory of several runs (or a Collector's file of
// several), the user names one. The exit status to end with, or 0 to go on.
int one_run_only(const char* tool, const lens_tools::ReadStats& read, const std::string& run,
                 const std::vector<std::string>& inputs) {
  const std::string dir = lens_tools::inputs_text(inputs);
  std::string runs;
  for (const std::string& id : read.run_ids) runs += (runs.empty() ? "" : ", ") + id;
  if (!run.empty() && !read.run_ids.contains(run)) {
    tell("lens %s: no run %s under %s (its runs: %s)\n", tool, run.c_str(), dir.c_str(),
         runs.empty() ? "none named" : runs.c_str());
    return kBadInput;
  }
  if (run.empty() && read.run_ids.size() > 1) {
    tell(
        "lens %s: %zu runs under %s (%s): their spans are not mixed; name one with --run ID, or give its "
        "own directory\n",
        tool, read.run_ids.size(), dir.c_str(), runs.c_str());
    return kBadInput;
  }
  return 0;
}

// --merge's torch.profiler trace, read before the run (a bad one fails fast); null when none was given.
std::unique_ptr<lens_tools::MergedProfile> profile_to_merge(const std::string& path, int rank) {
  if (path.empty()) return nullptr;
  return std::make_unique<lens_tools::MergedProfile>(
      lens_tools::MergedProfile{rank, lens_tools::read_profiler_trace(path)});
}

struct ReportOptions {
  std::vector<std::string> inputs;  // RUN_DIR...
  std::string run_dir, steps, html, run;
  std::string merge;  // --merge: a torch.profiler trace, for --html and convert
  int merge_rank = 0;
  bool json = false;
  std::vector<std::string> fail_if;
  int threads = 0;  // reading threads; 0: one a core
};

int report(const ReportOptions& o) {
  if (!o.merge.empty() && o.html.empty()) throw CLI::ValidationError("--merge", "draws on the page: give --html FILE");
  std::unique_ptr<lens_tools::MergedProfile> merged;
  try {
    merged = profile_to_merge(o.merge, o.merge_rank);
  } catch (const lens_tools::ProfilerTraceError& e) {
    tell("lens report: %s\n", e.what());
    return kBadInput;
  }
  std::vector<FailIf> conditions;
  for (const std::string& text : o.fail_if) conditions.push_back(parse_fail_if(text));
  const lens_tools::StepRange range = parse_steps(o.steps);
  const std::vector<std::string> files = lens_tools::telemetry_files(o.inputs);
  const std::string inputs = lens_tools::inputs_text(o.inputs);
  if (files.empty()) {
    tell("lens report: no telemetry files (*.jsonl, *.jsonl.gz) under %s\n", inputs.c_str());
    return kBadInput;
  }
  lens_tools::Report r(range);
  Progress progress;
  const lens_tools::ReadStats read =
      r.read(files, {.links = true, .progress = std::ref(progress), .run_id = o.run, .threads = o.threads});
  if (const int status = one_run_only("report", read, o.run, o.inputs)) return status;
  const lens_tools::Figures figures = r.figures(read, !o.html.empty());
  for (const auto& p : read.problems)
    tell("lens report: %s:%llu: %s\n", p.file.c_str(), static_cast<unsigned long long>(p.line), p.what.c_str());
  if (o.json) {
    std::cout << lens_tools::figures_json(figures).dump(2) << "\n";
  } else {
    std::cout << lens::internal::terminal_text(
        lens_tools::render_text(figures, {.every_step = !o.steps.empty()}));  // names from files, escaped
  }
  if (read.spans == 0) {
    tell("lens report: no span in %zu files under %s\n", files.size(), inputs.c_str());
    return kBadInput;
  }
  if (!o.html.empty()) {
    const lens_tools::StepRange shown = timeline_steps(range, figures.steps);
    const lens_tools::Timeline timeline = read_timeline(files, r.windows(shown), o.run, figures.clocks, o.threads);
    const std::string label = shown.first > shown.last ? "(none)"
                              : shown.first == shown.last
                                  ? std::to_string(shown.first)
                                  : std::to_string(shown.first) + "-" + std::to_string(shown.last);
    write_file(o.html, lens_tools::render_html(figures, timeline, label, merged.get()));
    tell("lens report: wrote %s\n", o.html.c_str());
  }
  int status = 0;
  for (const FailIf& c : conditions)
    if (const std::string why = failed(c, figures); !why.empty()) {
      tell("lens report: --fail-if %s: %s\n", c.text.c_str(), why.c_str());
      status = kFailed;
    }
  return status;
}

int convert(const std::vector<std::string>& run_dirs, const std::string& to, const std::string& output,
            const std::string& steps, const std::string& run, int threads, const std::string& merge, int merge_rank) {
  if (to != "chrome-json") throw CLI::ValidationError("--to", "'" + to + "' is not a known format (chrome-json)");
  std::unique_ptr<lens_tools::MergedProfile> merged;
  try {
    merged = profile_to_merge(merge, merge_rank);
  } catch (const lens_tools::ProfilerTraceError& e) {
    tell("lens convert: %s\n", e.what());
    return kBadInput;
  }
  const lens_tools::StepRange range = parse_steps(steps);
  const std::vector<std::string> files = lens_tools::telemetry_files(run_dirs);
  const std::string inputs = lens_tools::inputs_text(run_dirs);
  if (files.empty()) {
    tell("lens convert: no telemetry files (*.jsonl, *.jsonl.gz) under %s\n", inputs.c_str());
    return kBadInput;
  }
  std::map<std::string, std::vector<lens_tools::StepWindow>> windows;
  if (!steps.empty()) {  // the steps' windows first: a read of the step spans
    lens_tools::Report r(range);
    const lens_tools::ReadStats read =
        r.read(files, {.detail = false, .progress = {}, .run_id = run, .threads = threads});
    if (const int status = one_run_only("convert", read, run, run_dirs)) return status;
    windows = r.windows(range);
    if (windows.empty()) {
      tell("lens convert: no step span of iterations %s under %s\n", steps.c_str(), inputs.c_str());
      return kBadInput;
    }
  }
  lens_tools::Timeline timeline(std::move(windows));
  Progress progress;
  const lens_tools::ReadStats read = lens_tools::read_run(
      files, timeline, {.detail = true, .progress = std::ref(progress), .run_id = run, .threads = threads});
  if (const int status = one_run_only("convert", read, run, run_dirs)) return status;
  for (const auto& p : read.problems)
    tell("lens convert: %s:%llu: %s\n", p.file.c_str(), static_cast<unsigned long long>(p.line), p.what.c_str());
  if (read.spans == 0) {
    tell("lens convert: no span in %zu files under %s\n", files.size(), inputs.c_str());
    return kBadInput;
  }
  timeline.lay_out();
  const std::size_t events = lens_tools::write_chrome_trace(timeline, output, merged.get());
  tell("lens convert: wrote %zu events (%zu processes%s) to %s\n", events, timeline.processes.size(),
       merged ? " and a torch.profiler trace" : "", output.c_str());
  return 0;
}

// --merge PROFILER_TRACE and --merge-rank R, as report and convert take them.
void add_merge_options(CLI::App& command, ReportOptions& o, const std::string& merge_help) {
  command.add_option("--merge", o.merge, merge_help)->option_text("PROFILER_TRACE");
  command.add_option("--merge-rank", o.merge_rank, "The rank --merge's trace profiled (default 0)")
      ->check(CLI::NonNegativeNumber)
      ->option_text("R");
}

int lens_main(int argc, char** argv) {
  CLI::App app{
      "lens: read a training run's telemetry files (OTLP/JSON Lines, plain or .gz) with no server.\n"
      "  lens report RUN_DIR                 where the time went: steps, phases, stragglers, bubble, loss, drops\n"
      "  lens report RUN_DIR --html r.html   the same as one page to open in a browser, with a timeline\n"
      "  lens convert RUN_DIR --to chrome-json -o trace.json.gz   for Perfetto UI (ui.perfetto.dev)\n"
      "RUN_DIR is <MEGATRON_OTEL_FILE_DIR>/<run id>, a directory above runs, or one file; several are one run\n"
      "(a directory per node, a Collector's rotated files); --run ID picks one run where they hold several (they\n"
      "are never mixed)."};
  // The inputs are positional and repeatable: an option that takes one value must not swallow a RUN_DIR after it.
  app.allow_extras(false);
  app.require_subcommand(1);
  ReportOptions o;
  std::string to, output;
  CLI::App* rep = app.add_subcommand(
      "report",
      "What a person asks first about a run: who wrote it; per span name, count and p50/p90/p99/max over all "
      "ranks; step time per iteration and rank; where a step's time goes (forward, backward, pipeline receive "
      "wait, gradient-sync wait, tensor-parallel all-reduce wait, optimizer, other); stragglers (the rank the others "
      "wait for: its median compute over a window at least 1.3x its peers' (the ranks of its stage at its "
      "tensor-parallel position) while they wait for it, docs/TOOLS.md); the pipeline bubble of "
      "every stage beside (P-1)/(M+P-1); the first "
      "iteration, checkpoints, evaluations; loss and training metrics; what was lost. Exit 0; 1 when a --fail-if "
      "holds; 2 for bad input (nothing to read, no span, a malformed option).");
  rep->add_option("RUN_DIR", o.inputs,
                  "A run's directory (<FILE_DIR>/<run id>), a directory above runs, or one file; Collector file "
                  "exporter output too. Several are read as one run: a directory per node, a Collector's rotated "
                  "files")
      ->required();
  rep->footer(
      "Examples:\n"
      "  lens report build/demo/telemetry/<run id>\n"
      "  lens report RUN_DIR --steps 90-100 --json          (the figures of ten iterations, for a script)\n"
      "  lens report RUN_DIR --html report.html            (open report.html in any browser; no network)\n"
      "  lens report RUN_DIR --fail-if straggler --fail-if 'bubble-excess>10'   (in CI: exit 1 when one holds)\n"
      "  lens report node0/telemetry/RUN node1/telemetry/RUN   (one run, a directory per node)\n"
      "More: docs/TOOLS.md");
  rep->add_flag("--json", o.json, "The figures as JSON, for scripts and CI");
  rep->add_option("--steps", o.steps, "Only these iterations in the per-step figures: A-B or A")->option_text("A-B");
  rep->add_option("--run", o.run, "The run to read (its nemo.run.id) when RUN_DIR holds several: they are never mixed")
      ->option_text("ID");
  rep->add_option("--threads", o.threads,
                  "Threads that read the files, each its own (the figures are the same at any number); default: one a "
                  "core. Fewer under a limit on the address space (ulimit -v): about 84 MiB each")
      ->check(CLI::Range(1, static_cast<int>(lens_tools::kMaxReadingThreads)))
      ->option_text("N");
  rep->add_option(
         "--html", o.html,
         "Also write the report as one self-contained page (opens from disk): a timeline of the last two "
         "iterations, or of --steps (at most 8), one lane per rank, to zoom and click; compute per rank and loss "
         "over the run")
      ->option_text("FILE");
  add_merge_options(*rep, o,
                    "With --html: a torch.profiler trace of one rank of the run, drawn on the timeline below "
                    "that rank (as for convert)");
  rep->add_option("--fail-if", o.fail_if,
                  "Exit 1 when this holds (repeatable): straggler, problems (unreadable lines), bubble>PERCENT (a "
                  "stage's), bubble-excess>POINTS (above (P-1)/(M+P-1)), dropped>N (spans)")
      ->option_text("COND")
      ->allow_extra_args(false);  // one condition an occurrence: a RUN_DIR after it stays the RUN_DIR
  CLI::App* conv = app.add_subcommand(
      "convert",
      "Write a run's spans in another format. chrome-json: the Trace Event format of Perfetto UI and the Chrome "
      "DevTools Performance panel; one process per rank named 'rank R (pp S, dp D)', spans that nest on one track and "
      "those that overlap on lanes of their own, links as flow arrows forward in time, attributes as args. Exit 0, or "
      "2 for bad "
      "input.");
  conv->footer(
      "Example:\n  lens convert RUN_DIR --to chrome-json -o trace.json.gz --steps 50-52\n"
      "  lens convert RUN_DIR --to chrome-json -o merged.json --merge rank0.pt.trace.json --merge-rank 0\n"
      "  then open trace.json.gz in Perfetto UI: ui.perfetto.dev, Open trace file");
  conv->add_option("RUN_DIR", o.inputs, "As for report (several: one run)")->required();
  conv->add_option("--to", to, "The format: chrome-json")->required();
  conv->add_option("-o,--output", output, "The file to write; gzip when it ends in .gz")
      ->required()
      ->option_text("FILE");
  conv->add_option("--run", o.run, "As for report")->option_text("ID");
  conv->add_option("--threads", o.threads, "As for report")
      ->check(CLI::Range(1, static_cast<int>(lens_tools::kMaxReadingThreads)))
      ->option_text("N");
  conv->add_option("--steps", o.steps, "Only the spans inside these iterations' step spans: A-B or A")
      ->option_text("A-B");
  add_merge_options(*conv, o,
                    "A torch.profiler trace (.json or .json.gz, Kineto's or one with baseTimeNanoseconds) of one rank "
                    "of the run, put beside that rank's spans on the same clock");
  CLI::App* ctl = app.add_subcommand(
      "ctl",
      "Talk to a running job started with MEGATRON_OTEL_CONTROL=1 (its rank 0 serves a control endpoint on loopback, "
      "with a "
      "token in the run directory's control.json). Exit 0; 1 refused by the job (a bad spec, a change pending, a "
      "wrong token); 2 no control.json or no answer.");
  ctl->add_option("RUN_DIR", o.run_dir, "The run's directory (<FILE_DIR>/<run id>) on rank 0's host, or the one above")
      ->required();
  ctl->require_subcommand(1);
  CLI::App* ctl_status = ctl->add_subcommand("status", "The span groups now, the last iteration, the world size");
  std::string spec;
  std::int64_t iterations = 0;
  CLI::App* ctl_groups = ctl->add_subcommand(
      "span-groups",
      "Switch every rank's span groups at the next iteration boundary (the grammar of MEGATRON_OTEL_SPAN_GROUPS, "
      "with -name; bounded by what each rank may record: a non-exporting rank stays empty)");
  ctl_groups->add_option("SPEC", spec, "e.g. per_step, or all,-layer")->required();
  ctl_groups->add_option("--for", iterations, "For N iterations (1 to 10^9), then the groups before come back")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}))
      ->option_text("N");
  ctl->footer(
      "Examples:\n  lens ctl RUN_DIR span-groups per_step --for 20   (20 iterations in detail, then back)\n"
      "  lens ctl RUN_DIR status");
  CLI::App* hang = app.add_subcommand(
      "hang",
      "Read the hang snapshots of a job that stopped making progress (rank<R>.snapshot.json, written by every rank "
      "on MEGATRON_OTEL_HANG_SIGNAL, SIGUSR1 by default, or by the MEGATRON_OTEL_HANG_TIMEOUT watchdog) and say which "
      "rank is behind and "
      "where the others wait; a rank with no snapshot is named. Exit 0, or 2 when there is no snapshot to read.");
  hang->add_option("RUN_DIR", o.inputs,
                   "The run's directory (<FILE_DIR>/<run id>), or the one above; several: one per node, each "
                   "node's snapshots on its own disk (a node's directory missing: its ranks named as without one)")
      ->required();
  bool hang_json = false, hang_send = false;
  hang->add_flag("--json", hang_json, "The verdict as JSON: behind, missing, and the ranks grouped by where they are");
  hang->add_flag("--signal", hang_send,
                 "First send the hang signal to this run's rank processes on this host (as their rank<R>.process.json "
                 "records say; nothing else, never the launcher), wait for their snapshots, then give the verdict");
  hang->footer(
      "Example:\n  lens hang telemetry/<run id> --signal   (on each host of the job; then once more, without "
      "--signal)\n"
      "More: docs/TOOLS.md");
  try {
    app.parse(argc, argv);
    if (hang->parsed())
      return hang_send ? lens_tools::hang_signal(o.inputs, hang_json) : lens_tools::hang(o.inputs, hang_json);
    if (ctl->parsed())
      return ctl_status->parsed() ? lens_tools::ctl_status(o.run_dir)
                                  : lens_tools::ctl_span_groups(o.run_dir, spec, iterations);
    return rep->parsed() ? report(o) : convert(o.inputs, to, output, o.steps, o.run, o.threads, o.merge, o.merge_rank);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: CLI11 prints them
    // CLI11 would echo the option's text as it came (an invalid --fail-if with escape sequences in it).
    tell("%s\nRun with --help for more information.\n", e.what());
    return kBadInput;
  } catch (const std::exception& e) {
    tell("lens: %s\n", e.what());
    return kBadInput;
  }
}

}  // namespace

// What was written to stdout is all there, or the exit status says it is not: a full disk or a closed pipe loses
// the end of a report at the last flush or at close, after every command's own writes succeeded.
int with_stdout_delivered(int status) {
  std::cout.flush();
  const bool lost =
      std::cout.fail() || std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::fclose(stdout) != 0;
  if (!lost) return status;
  tell("lens: could not write the output to stdout (%s): is the disk full?\n", std::strerror(errno));
  return kBadInput;
}

int main(int argc, char** argv) {
  try {
    return with_stdout_delivered(lens_main(argc, argv));
  } catch (...) {  // outside the parse's own handling: building the command line ran out of memory
    tell("lens: could not start\n");
    return kBadInput;
  }
}
