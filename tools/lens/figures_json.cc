#include <map>
#include <optional>
#include <vector>

#include "figures.h"
#include "watch/straggler_rule.h"

namespace lens_tools {
namespace {

using nlohmann::json;

json figure_json(const Figure& v) { return v ? json(*v) : json(nullptr); }
json number_or_null(double v) { return figure_json(figure_of(v)); }

json run_json(const RunFigures& r) {
  return {{"run_ids", r.run_ids},
          {"services", r.services},
          {"ranks", r.ranks},
          {"world_size", r.world_size},
          {"tensor_parallel_size", r.tensor_parallel_size},
          {"pipeline_parallel_size", r.pipeline_parallel_size},
          {"data_parallel_size", r.data_parallel_size}};
}

json device_time_json(const std::optional<DeviceTimeFigures>& d) {
  if (!d) return nullptr;
  return {{"count", d->count},   {"p50_ms", d->p50_ms}, {"p90_ms", d->p90_ms},
          {"p99_ms", d->p99_ms}, {"max_ms", d->max_ms}, {"mean_ms", d->mean_ms}};
}

json spans_json(const std::vector<SpanFigures>& spans) {
  json out = json::array();
  for (const SpanFigures& s : spans)
    out.push_back({{"name", s.name},
                   {"count", s.count},
                   {"p50_ms", s.p50_ms},
                   {"p90_ms", s.p90_ms},
                   {"p99_ms", s.p99_ms},
                   {"max_ms", s.max_ms},
                   {"mean_ms", s.mean_ms},
                   {"device", device_time_json(s.device)},
                   {"launch_overhead_ms", figure_json(s.launch_overhead_ms)}});
  return out;
}

json steps_json(const std::vector<StepFigures>& steps) {
  json out = json::array();
  for (const StepFigures& s : steps)
    out.push_back({{"iteration", s.iteration},
                   {"ranks", s.ranks},
                   {"median_ms", s.median_ms},
                   {"max_ms", s.max_ms},
                   {"slowest_rank", s.slowest_rank}});
  return out;
}

json phase_row_json(const PhaseRow& r) {
  json row = {{"steps", r.steps}, {"step_ms", r.step_ms}, {"other_ms", r.other_ms}};
  json device = json::object(), overhead = json::object();
  for (int k = 0; k < kPhaseCount; ++k) {
    row[std::string(kPhaseNames[k]) + "_ms"] = figure_json(r.phase_ms[k]);
    device[kPhaseNames[k]] = figure_json(r.device_phase_ms[k]);
    overhead[kPhaseNames[k]] = figure_json(r.launch_overhead_ms[k]);
  }
  row["device_ms"] = device;
  row["launch_overhead_ms"] = overhead;
  return row;
}

json phases_json(const PhaseFigures& p) {
  json per_rank = json::array();
  for (const auto& [rank, r] : p.per_rank) {
    json row = phase_row_json(r);
    row["rank"] = rank;
    per_rank.push_back(row);
  }
  json unmeasured = json::object();
  for (int k = 0; k < kPhaseCount; ++k)
    if (!p.not_measured[k].empty()) unmeasured[kPhaseNames[k]] = p.not_measured[k];
  return {{"mean_per_step", phase_row_json(p.mean_per_step)}, {"per_rank", per_rank}, {"not_measured", unmeasured}};
}

json straggler_rows_json(const std::vector<StragglerRow>& rows) {
  json out = json::array();
  for (const StragglerRow& r : rows)
    out.push_back({{"rank", r.rank},
                   {"stage", r.stage},
                   {"steps_scored", r.steps_scored},
                   {"steps_flagged", r.steps_flagged},
                   {"share", r.share},
                   {"score", figure_json(r.score)},
                   {"compute_ms_median", figure_json(r.compute_ms_median)},
                   {"stage_compute_ms_median", figure_json(r.stage_compute_ms_median)},
                   {"wait_ms_median", figure_json(r.wait_ms_median)},
                   {"stage_wait_ms_median", figure_json(r.stage_wait_ms_median)}});
  return out;
}

json stragglers_json(const StragglerFigures& s) {
  return {{"rule",
           {{"window_steps", StragglerRule::kWindowSteps},
            {"compute_ratio_at_least", lens::straggler::Rule::kComputeRatio},
            {"compute_excess_ms_at_least", lens::straggler::Rule::kMinExcessNs / 1e6},
            {"peers_extra_wait_over_excess_at_least", lens::straggler::Rule::kWaitedForShare},
            {"min_steps_per_window", lens::straggler::Rule::kMinSteps},
            {"share_above", StragglerRule::kShare},
            {"min_ranks_per_stage", 2}}},
          {"ranks", straggler_rows_json(s.ranks)},
          {"named", straggler_rows_json(s.named)},
          {"unscored_stages", s.unscored_stages},
          {"not_scored", s.not_scored.empty() ? json(nullptr) : json(s.not_scored)}};
}

json goodput_json(const GoodputFigures& g) {
  if (!g.not_measured.empty()) return {{"not_measured", g.not_measured}};
  return {{"rank", g.rank},
          {"attempts", g.attempts},
          {"wall_s", g.wall_s},
          {"goodput_s", g.goodput_s},
          {"share", g.share},
          {"startup_s", g.startup_s},
          {"checkpoint_s", g.checkpoint_s},
          {"evaluation_s", g.evaluation_s},
          {"restarts_s", g.restarts_s},
          {"redone_s", g.redone_s},
          {"redone_iterations", g.redone_iterations},
          {"other_s", g.other_s}};
}

json clocks_json(const ClockFigures& c) {
  json hosts = json::array();
  for (const HostClock& h : c.hosts)
    hosts.push_back({{"host", h.host},
                     {"offset_ms", figure_json(h.offset_ms)},
                     {"at_least_ms", figure_json(h.at_least_ms)},
                     {"at_most_ms", figure_json(h.at_most_ms)},
                     {"links", h.links}});
  return {{"reference_host", c.reference.empty() ? json(nullptr) : json(c.reference)},
          {"hosts", hosts},
          {"corrected", c.corrected},
          {"not_bounded", c.not_bounded.empty() ? json(nullptr) : json(c.not_bounded)}};
}

json bubble_json(const std::vector<BubbleRow>& bubble) {
  json out = json::array();
  for (const BubbleRow& b : bubble) {
    json row = {{"stage", b.stage},
                {"steps", b.steps},
                {"microbatches", figure_json(b.microbatches)},
                {"measured", figure_json(b.measured)},
                {"theoretical", figure_json(b.theoretical)}};
    if (!b.not_measured.empty()) row["not_measured"] = b.not_measured;
    out.push_back(row);
  }
  return out;
}

json first_iteration_json(const std::optional<FirstIteration>& first) {
  if (!first) return nullptr;
  return {{"iteration", first->iteration},
          {"step_ms", first->step_ms},
          {"later_median_ms", first->later_median_ms},
          {"overhead_ms", first->overhead_ms}};
}

json checkpoints_json(const std::vector<CheckpointFigures>& checkpoints) {
  json out = json::array();
  for (const CheckpointFigures& c : checkpoints)
    out.push_back({{"iteration", c.iteration},
                   {"ranks", c.ranks},
                   {"save_ms_max", c.save_ms_max},
                   {"async_write_ms_max", c.async_write_ms_max}});
  return out;
}

json evaluations_json(const std::vector<EvaluationFigures>& evaluations) {
  json out = json::array();
  for (const EvaluationFigures& e : evaluations)
    out.push_back({{"after_iteration", e.after_iteration}, {"ranks", e.ranks}, {"max_ms", e.max_ms}});
  return out;
}

json loss_json(const std::vector<LossPoint>& loss) {
  json out = json::array();
  for (const LossPoint& l : loss) out.push_back({{"iteration", l.iteration}, {"loss", number_or_null(l.loss)}});
  return out;
}

json training_json(const std::map<std::string, TrainingSeries>& training) {
  json out = json::object();
  for (const auto& [name, series] : training) out[name] = {{"rank", series.rank}, {"values", series.values}};
  return out;
}

json group_changes_json(const std::vector<GroupChangeFigures>& changes) {
  json out = json::array();
  for (const GroupChangeFigures& c : changes)
    out.push_back({{"iteration", c.iteration},
                   {"span_groups", c.span_groups},
                   {"for_iterations", c.for_iterations},
                   {"restored", c.restored},
                   {"ranks", c.ranks}});
  return out;
}

json lost_json(const LostFigures& l) {
  return {{"spans_exported", l.spans_exported},
          {"spans_dropped", l.spans_dropped},
          {"dropped_by_reason", l.dropped_by_reason},
          {"spans_truncated", l.spans_truncated}};
}

json read_json(const ReadFigures& r) {
  json problems = json::array();
  for (const ReadProblem& p : r.problems) problems.push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}});
  return {{"files", r.files},
          {"lines", r.lines},
          {"bytes", r.bytes},
          {"spans", r.spans},
          {"spans_of_other_names", r.spans_of_other_names},
          {"problems", problems}};
}

}  // namespace

json figures_json(const Figures& f) {
  return {{"run", run_json(f.run)},
          {"spans", spans_json(f.spans)},
          {"steps", steps_json(f.steps)},
          {"phases", phases_json(f.phases)},
          {"stragglers", stragglers_json(f.stragglers)},
          {"goodput", goodput_json(f.goodput)},
          {"clocks", clocks_json(f.clocks)},
          {"bubble", bubble_json(f.bubble)},
          {"first_iteration", first_iteration_json(f.first_iteration)},
          {"checkpoints", checkpoints_json(f.checkpoints)},
          {"evaluations", evaluations_json(f.evaluations)},
          {"loss", loss_json(f.loss)},
          {"training_metrics", training_json(f.training_metrics)},
          {"span_group_changes", group_changes_json(f.span_group_changes)},
          {"lost", lost_json(f.lost)},
          {"read", read_json(f.read)}};
}

}  // namespace lens_tools
