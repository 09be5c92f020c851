#include "text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include "report.h"

namespace lens_tools {
namespace {

using Line = std::function<void(const std::string&)>;

std::string format_ms(double v) {
  char text[32];
  const double size = std::fabs(v);  // a launch overhead may be negative
  std::snprintf(text, sizeof text, size >= 100 ? "%.0f" : size >= 1 ? "%.2f" : "%.3f", v);
  return text;
}

std::string ms_or_dash(const Figure& v) { return v ? format_ms(*v) : "-"; }
std::string ratio_or_dash(const Figure& v) {
  if (!v) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", *v);
  return buffer;
}

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename Strings>
std::string joined(const Strings& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Of `n` values, at most 12 indices, evenly picked, for a line of text.
std::vector<std::size_t> picked(std::size_t n) {
  const std::size_t shown = std::min<std::size_t>(n, 12);
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < shown; ++i) at.push_back(shown == 1 ? 0 : i * (n - 1) / (shown - 1));
  return at;
}

std::string short_series(const std::vector<double>& values) {
  std::string out;
  char text[32];
  for (std::size_t at : picked(values.size())) {
    std::snprintf(text, sizeof text, "%s%.4g", out.empty() ? "" : " ", values[at]);
    out += text;
  }
  return out;
}

// The run, and what was read.
void render_header(const Figures& f, const Line& line) {
  char buffer[512];
  const std::string ids = joined(f.run.run_ids), services = joined(f.run.services);
  std::snprintf(buffer, sizeof buffer, "run %s  service %s  %d ranks seen of %d (tensor %d x pipeline %d x data %d)",
                ids.empty() ? "?" : ids.c_str(), services.empty() ? "?" : services.c_str(),
                static_cast<int>(f.run.ranks.size()), f.run.world_size, f.run.tensor_parallel_size,
                f.run.pipeline_parallel_size, f.run.data_parallel_size);
  line(buffer);
  std::snprintf(buffer, sizeof buffer, "read %llu files, %llu spans, %.1f MB",
                static_cast<unsigned long long>(f.read.files), static_cast<unsigned long long>(f.read.spans),
                static_cast<double>(f.read.bytes) / 1e6);
  line(buffer);
  if (f.read.spans_of_other_names > 0) {
    std::snprintf(buffer, sizeof buffer, "%llu spans of names past the first %zu are counted as '%s'",
                  static_cast<unsigned long long>(f.read.spans_of_other_names), kMaxSpanNames,
                  std::string(kOtherSpanNames).c_str());
    line(buffer);
  }
}

// The steps in one line: how many, their median, the slowest.
void render_step_summary(const std::vector<StepFigures>& steps, const Line& line) {
  std::vector<double> medians;
  const StepFigures* slowest = nullptr;
  for (const StepFigures& s : steps) {
    medians.push_back(s.median_ms);
    if (slowest == nullptr || s.max_ms > slowest->max_ms) slowest = &s;
  }
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "steps: %zu iterations (%lld-%lld), step time %s ms (median over iterations of the median over "
                "ranks); slowest: iteration %lld, %s ms on rank %d",
                steps.size(), static_cast<long long>(steps.front().iteration),
                static_cast<long long>(steps.back().iteration), format_ms(median_of(medians)).c_str(),
                static_cast<long long>(slowest->iteration), format_ms(slowest->max_ms).c_str(), slowest->slowest_rank);
  line(buffer);
}

void render_loss(const std::vector<LossPoint>& loss, const Line& line) {
  char buffer[64];
  std::string series;
  for (std::size_t at : picked(loss.size())) {
    std::snprintf(buffer, sizeof buffer, "%s%lld:%.3f", series.empty() ? "" : " ",
                  static_cast<long long>(loss[at].iteration), loss[at].loss);
    series += buffer;
  }
  line("training loss by iteration (" + std::to_string(loss.size()) + " iterations): " + series);
}

void render_phases(const PhaseFigures& phases, const Line& line) {
  const PhaseRow& mean = phases.mean_per_step;
  if (mean.steps <= 0) return;
  line("");
  line("where a step's time goes (mean per step over ranks, ms; step " + format_ms(mean.step_ms) + ")");
  std::string row = " ";
  for (int k = 0; k < kPhaseCount; ++k) row += std::string(" ") + kPhaseNames[k] + " " + ms_or_dash(mean.phase_ms[k]);
  line(row + " other " + format_ms(mean.other_ms));
  std::map<std::string, std::string> phases_by_reason;  // one line a reason: "forward, backward: ..."
  for (int k = 0; k < kPhaseCount; ++k)
    if (const std::string& why = phases.not_measured[k]; !why.empty())
      phases_by_reason[why] += std::string(phases_by_reason[why].empty() ? "" : ", ") + kPhaseNames[k];
  for (const auto& [why, names] : phases_by_reason) {
    std::string text = "  not measured (-): ";
    line(text.append(names).append(": ").append(why).append("; 'other' holds their time"));
  }
  if (std::none_of(mean.device_phase_ms.begin(), mean.device_phase_ms.end(), [](const Figure& f) { return f; })) return;
  std::string device = "  on the device (its spans by the step they start in):",
              overhead = "  launch overhead (host - device):";
  for (int k = 0; k < kPhaseCount; ++k) {
    device += std::string(" ") + kPhaseNames[k] + " " + ms_or_dash(mean.device_phase_ms[k]);
    overhead += std::string(" ") + kPhaseNames[k] + " " + ms_or_dash(mean.launch_overhead_ms[k]);
  }
  line(device);
  line(overhead);
}

void render_goodput(const GoodputFigures& g, const Line& line) {
  line("");
  if (!g.not_measured.empty()) {
    line("goodput: not measured: " + g.not_measured);
    return;
  }
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "goodput: %.1f%% of %.1f s wall in steps that count (rank %d, %d process%s); the rest: startup %.1f s, "
                "checkpoints %.1f s, evaluation %.1f s, restarts %.1f s, %lld iterations redone %.1f s, other %.1f s",
                100 * g.share, g.wall_s, g.rank, g.attempts, g.attempts == 1 ? "" : "es", g.startup_s, g.checkpoint_s,
                g.evaluation_s, g.restarts_s, static_cast<long long>(g.redone_iterations), g.redone_s, g.other_s);
  line(buffer);
}

void render_stragglers(const StragglerFigures& stragglers, const Line& line) {
  if (stragglers.ranks.empty() && stragglers.unscored_stages.empty() && stragglers.not_scored.empty()) return;
  line("");
  if (!stragglers.not_scored.empty())
    line("stragglers: not scored: " + stragglers.not_scored);
  else if (stragglers.named.empty())
    line(
        "stragglers: none (no rank computed 1.3x its stage peers' while they waited for it, in more than half its "
        "steps)");
  char buffer[512];
  for (const StragglerRow& r : stragglers.named) {
    std::snprintf(buffer, sizeof buffer,
                  "straggler: rank %d (stage %d), flagged in %d of %d steps: computes %sx its peers' (%s ms vs "
                  "%s), waits %s ms vs %s",
                  r.rank, r.stage, r.steps_flagged, r.steps_scored, ratio_or_dash(r.score).c_str(),
                  ms_or_dash(r.compute_ms_median).c_str(), ms_or_dash(r.stage_compute_ms_median).c_str(),
                  ms_or_dash(r.wait_ms_median).c_str(), ms_or_dash(r.stage_wait_ms_median).c_str());
    line(buffer);
  }
  if (!stragglers.unscored_stages.empty())
    line("stragglers: ranks with no replica at their stage and tensor-parallel position are not scored (" +
         std::to_string(stragglers.unscored_stages.size()) + " stages)");
}

// Hosts' clocks, when the run has more than one host: what the bubble and the pictures were corrected by.
void render_clocks(const ClockFigures& c, const Line& line) {
  if (c.reference.empty()) return;
  line("");
  line("clocks of " + std::to_string(c.hosts.size() + 1) + " hosts against " + c.reference +
       "'s, from links between them (a receive cannot end before its send began)" +
       (c.corrected ? ": the bubble and the pictures use corrected times" : ""));
  char buffer[512];
  for (const HostClock& h : c.hosts) {
    if (!h.offset_ms) {
      line("  " + h.host + ": offset unknown");
      continue;
    }
    const std::string low = h.at_least_ms ? format_ms(*h.at_least_ms) : "-inf";
    const std::string high = h.at_most_ms ? format_ms(*h.at_most_ms) : "+inf";
    std::snprintf(buffer, sizeof buffer, "  %s: %+.3f ms (the links bound it to [%s, %s] ms; %llu links)",
                  h.host.c_str(), *h.offset_ms, low.c_str(), high.c_str(), static_cast<unsigned long long>(h.links));
    line(buffer);
  }
  if (!c.not_bounded.empty())
    line("  not bounded, so figures that compare these hosts' times (the bubble, the timeline) may be off: " +
         c.not_bounded);
}

void render_bubble(const std::vector<BubbleRow>& bubble, const Line& line) {
  if (bubble.empty()) return;
  line("");
  line("pipeline bubble per stage (share of forward-backward not computing; 1F1B: (P-1)/(M+P-1))");
  char buffer[512];
  for (const BubbleRow& b : bubble) {
    std::snprintf(buffer, sizeof buffer, "  stage %d: %s measured, %s theoretical (%s micro-batches)", b.stage,
                  b.measured ? percent(*b.measured).c_str() : "not",
                  b.theoretical ? percent(*b.theoretical).c_str() : "-",
                  b.microbatches ? std::to_string(static_cast<int>(*b.microbatches)).c_str() : "?");
    line(buffer);
  }
  if (!bubble.front().not_measured.empty()) line("  bubble not measured: " + bubble.front().not_measured);
}

// The first iteration, checkpoints, span-group changes, evaluations and training metrics.
void render_events(const Figures& f, const Line& line) {
  char buffer[512];
  if (f.first_iteration) {
    std::snprintf(buffer, sizeof buffer, "first iteration (%lld): %s ms, %s ms more than the median of the others",
                  static_cast<long long>(f.first_iteration->iteration), format_ms(f.first_iteration->step_ms).c_str(),
                  format_ms(f.first_iteration->overhead_ms).c_str());
    line("");
    line(buffer);
  }
  if (!f.first_iteration && (!f.checkpoints.empty() || !f.evaluations.empty())) line("");
  for (const CheckpointFigures& c : f.checkpoints) {
    std::snprintf(buffer, sizeof buffer,
                  "checkpoint at iteration %lld: save %s ms (slowest of %d ranks), async write %s ms",
                  static_cast<long long>(c.iteration), format_ms(c.save_ms_max).c_str(), static_cast<int>(c.ranks),
                  format_ms(c.async_write_ms_max).c_str());
    line(buffer);
  }
  for (const GroupChangeFigures& c : f.span_group_changes) {
    std::string text = "span groups " + std::string(c.restored ? "restored" : "changed") + " from iteration " +
                       std::to_string(c.iteration) + " on " + std::to_string(c.ranks) + " ranks";
    if (c.for_iterations > 0) text += " for " + std::to_string(c.for_iterations) + " iterations";
    line(text + ": " + c.span_groups);
  }
  for (const EvaluationFigures& e : f.evaluations) {
    std::snprintf(buffer, sizeof buffer, "evaluation after iteration %lld: %s ms (slowest of %d ranks)",
                  static_cast<long long>(e.after_iteration), format_ms(e.max_ms).c_str(), e.ranks);
    line(buffer);
  }
  for (const auto& [name, series] : f.training_metrics)
    line(name + " (rank " + std::to_string(series.rank) + "): " + short_series(series.values));
}

void render_lost(const Figures& f, const Line& line) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, "lost: %.0f spans dropped, %.0f exported (lens's own counters)",
                f.lost.spans_dropped, f.lost.spans_exported);
  line(buffer);
  if (f.lost.spans_truncated > 0)
    line("cut short: " + std::to_string(f.lost.spans_truncated) +
         " spans were still open at shutdown (nemo.span.truncated; their steps are left out of the step figures)");
  for (const ReadProblem& p : f.read.problems) {
    std::snprintf(buffer, sizeof buffer, "problem: %s:%llu: %s", p.file.c_str(),
                  static_cast<unsigned long long>(p.line), p.what.c_str());
    line(buffer);
  }
}

void render_span_table(const std::vector<SpanFigures>& spans, const Line& line) {
  char buffer[512];
  line("spans, all ranks (ms)");
  std::snprintf(buffer, sizeof buffer, "  %-46s %9s %10s %10s %10s %10s", "name", "count", "p50", "p90", "p99", "max");
  line(buffer);
  for (const SpanFigures& s : spans) {
    std::snprintf(buffer, sizeof buffer, "  %-46s %9llu %10s %10s %10s %10s", s.name.c_str(),
                  static_cast<unsigned long long>(s.count), format_ms(s.p50_ms).c_str(), format_ms(s.p90_ms).c_str(),
                  format_ms(s.p99_ms).c_str(), format_ms(s.max_ms).c_str());
    line(buffer);
  }
  if (std::none_of(spans.begin(), spans.end(), [](const SpanFigures& s) { return s.device.has_value(); })) return;
  line("");
  line("device time beside host time, all ranks (ms; docs/GPU.md): launch overhead = host mean - device mean");
  std::snprintf(buffer, sizeof buffer, "  %-46s %9s %10s %10s %10s %10s %10s", "name", "count", "device p50",
                "device max", "host mean", "dev. mean", "overhead");
  line(buffer);
  for (const SpanFigures& s : spans) {
    if (!s.device) continue;
    std::snprintf(buffer, sizeof buffer, "  %-46s %9llu %10s %10s %10s %10s %10s", s.name.c_str(),
                  static_cast<unsigned long long>(s.device->count), format_ms(s.device->p50_ms).c_str(),
                  format_ms(s.device->max_ms).c_str(), s.count > 0 ? format_ms(s.mean_ms).c_str() : "-",
                  format_ms(s.device->mean_ms).c_str(), ms_or_dash(s.launch_overhead_ms).c_str());
    line(buffer);
  }
}

void render_step_table(const std::vector<StepFigures>& steps, const Line& line) {
  char buffer[512];
  line("step time per iteration, over ranks (ms)");
  std::snprintf(buffer, sizeof buffer, "  %9s %6s %10s %10s %13s", "iteration", "ranks", "median", "max",
                "slowest rank");
  line(buffer);
  for (const StepFigures& s : steps) {
    std::snprintf(buffer, sizeof buffer, "  %9lld %6d %10s %10s %13d", static_cast<long long>(s.iteration),
                  static_cast<int>(s.ranks), format_ms(s.median_ms).c_str(), format_ms(s.max_ms).c_str(),
                  s.slowest_rank);
    line(buffer);
  }
}

}  // namespace

// The summary first (what a person asks first), then the tables.
std::string render_text(const Figures& f, const TextOptions& options) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  render_header(f, line);
  if (!f.steps.empty()) {
    line("");
    render_step_summary(f.steps, line);
  }
  if (!f.loss.empty()) render_loss(f.loss, line);
  render_phases(f.phases, line);
  render_stragglers(f.stragglers, line);
  render_goodput(f.goodput, line);
  render_clocks(f.clocks, line);
  render_bubble(f.bubble, line);
  render_events(f, line);
  line("");
  render_lost(f, line);
  line("");
  render_span_table(f.spans, line);
  if (!f.steps.empty()) {
    line("");
    if (options.every_step || f.steps.size() <= kStepRowsShown)
      render_step_table(f.steps, line);
    else
      line("step time per iteration: " + std::to_string(f.steps.size()) + " rows, shown with --steps A-B (or all " +
           "in --json)");
  }
  return out;
}

}  // namespace lens_tools
