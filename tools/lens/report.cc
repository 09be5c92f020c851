#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lens_tools {
namespace {

constexpr double kBucketBase = 1.01;
constexpr std::int64_t kMaxIterations = std::int64_t{1} << 32;  // beyond: not a real iteration number

bool is_step_span(std::string_view name) {
  return name == "megatron.train_step" || name == "megatron.train.iteration";  // SPAN_NAMES documented, megatron
}

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string format_ms(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f" : v >= 1 ? "%.2f" : "%.3f", v);
  return text;
}

}  // namespace

void Durations::add(std::uint64_t ns) {
  ++count_;
  max_ = std::max(max_, ns);
  if (buckets_.empty() && exact_.size() < kExactLimit) {
    exact_.push_back(ns);
    sorted_ = false;
    return;
  }
  if (!exact_.empty()) {  // past the limit: move the exact values into the histogram once
    for (std::uint64_t v : exact_)
      ++buckets_[v == 0 ? -1 : static_cast<int>(std::floor(std::log(v) / std::log(kBucketBase)))];
    exact_.clear();
    exact_.shrink_to_fit();
  }
  ++buckets_[ns == 0 ? -1 : static_cast<int>(std::floor(std::log(ns) / std::log(kBucketBase)))];
}

std::uint64_t Durations::percentile(double q) {
  if (count_ == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  const std::uint64_t target = std::max<std::uint64_t>(rank, 1);
  if (buckets_.empty()) {
    if (!sorted_) std::sort(exact_.begin(), exact_.end());
    sorted_ = true;
    return exact_[target - 1];
  }
  std::uint64_t seen = 0;
  for (const auto& [bucket, n] : buckets_) {
    seen += n;
    if (seen >= target)
      return bucket < 0 ? 0 : std::min(max_, static_cast<std::uint64_t>(std::pow(kBucketBase, bucket + 0.5)));
  }
  return max_;
}

void Report::span(const SpanRow& s) {
  const Origin& o = *s.origin;
  if (!o.run_id.empty()) run_ids_.insert(o.run_id);
  if (!o.service.empty()) services_.insert(o.service);
  if (o.rank >= 0) ranks_.insert(o.rank);
  world_size_ = std::max(world_size_, o.world_size);
  pipeline_size_ = std::max(pipeline_size_, o.pipeline_size);
  data_parallel_size_ = std::max(data_parallel_size_, o.data_parallel_size);
  if (is_step_span(s.name) && s.iteration >= 0 && s.iteration < kMaxIterations) {
    const auto at = static_cast<std::size_t>(s.iteration);
    if (s.loss) {
      if (loss_.size() <= at) loss_.resize(at + 1, std::nan(""));
      loss_[at] = *s.loss;
    }
    if (steps_.contains(s.iteration)) {
      std::vector<std::uint64_t>& column = step_ns_by_rank_[o.rank];
      if (column.size() <= at) column.resize(at + 1, 0);
      column[at] = std::max<std::uint64_t>(s.duration_ns(), 1);  // 0 marks "none"
    }
  }
  auto it = durations_.find(s.name);
  if (it == durations_.end()) it = durations_.emplace(std::string(s.name), Durations{}).first;
  it->second.add(s.duration_ns());
}

void Report::metric(const MetricPoint& p) {
  if (p.name == "lens.spans.exported" || p.name == "lens.spans.dropped") {
    // Cumulative per process: its last value counts (a rank and its checkpoint worker are two processes).
    const Origin& o = *p.origin;
    LastValue& last = counters_[o.run_id + '\x1f' + std::to_string(o.rank) + '\x1f' + std::to_string(o.pid) + '\x1f' +
                                std::string(p.name) + '\x1f' + std::string(p.reason)];
    if (p.time_ns >= last.time_ns) last = {p.time_ns, p.value};
  }
}

nlohmann::json Report::figures(const ReadStats& read) {
  using nlohmann::json;
  json out;
  out["run"] = {{"run_ids", run_ids_},
                {"services", services_},
                {"ranks", ranks_},
                {"world_size", world_size_},
                {"pipeline_parallel_size", pipeline_size_},
                {"data_parallel_size", data_parallel_size_}};
  json spans = json::array();
  for (auto& [name, d] : durations_) {
    spans.push_back({{"name", name},
                     {"count", d.count()},
                     {"p50_ms", ms(d.percentile(0.50))},
                     {"p90_ms", ms(d.percentile(0.90))},
                     {"p99_ms", ms(d.percentile(0.99))},
                     {"max_ms", ms(d.max())}});
  }
  out["spans"] = spans;
  json steps = json::array();
  std::size_t iterations = 0;
  for (const auto& [rank, column] : step_ns_by_rank_) iterations = std::max(iterations, column.size());
  std::vector<std::uint64_t> times;
  for (std::size_t it = 0; it < iterations; ++it) {
    times.clear();
    int slowest = -1;
    std::uint64_t longest = 0;
    for (const auto& [rank, column] : step_ns_by_rank_) {
      const std::uint64_t ns = it < column.size() ? column[it] : 0;
      if (ns == 0) continue;
      times.push_back(ns);
      if (slowest < 0 || ns > longest) slowest = rank, longest = ns;
    }
    if (times.empty()) continue;
    std::sort(times.begin(), times.end());
    const double median = times.size() % 2 == 1 ? ms(times[times.size() / 2])
                                                : (ms(times[times.size() / 2 - 1]) + ms(times[times.size() / 2])) / 2;
    steps.push_back({{"iteration", it},
                     {"ranks", times.size()},
                     {"median_ms", median},
                     {"max_ms", ms(longest)},
                     {"slowest_rank", slowest}});
  }
  out["steps"] = steps;
  json loss = json::array();
  for (std::size_t it = 0; it < loss_.size(); ++it)
    if (!std::isnan(loss_[it])) loss.push_back({{"iteration", it}, {"loss", loss_[it]}});
  out["loss"] = loss;
  double exported = 0;
  std::map<std::string, double> dropped;
  for (const auto& [key, last] : counters_) {
    const auto reason_at = key.rfind('\x1f');
    const auto name_at = key.rfind('\x1f', reason_at - 1);
    const std::string name = key.substr(name_at + 1, reason_at - name_at - 1), reason = key.substr(reason_at + 1);
    if (name == "lens.spans.exported")
      exported += last.value;
    else
      dropped[reason] += last.value;
  }
  double dropped_total = 0;
  for (const auto& [reason, n] : dropped) dropped_total += n;
  out["lost"] = {{"spans_exported", exported}, {"spans_dropped", dropped_total}, {"dropped_by_reason", dropped}};
  json problems = json::array();
  for (const ReadProblem& p : read.problems) problems.push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}});
  out["read"] = {{"files", read.files},
                 {"lines", read.lines},
                 {"bytes", read.bytes},
                 {"spans", read.spans},
                 {"problems", problems}};
  return out;
}

std::string render_text(const nlohmann::json& f) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  char buffer[512];
  const auto& run = f["run"];
  std::string ids;
  for (const auto& id : run["run_ids"]) ids += (ids.empty() ? "" : ", ") + id.get<std::string>();
  std::string services;
  for (const auto& s : run["services"]) services += (services.empty() ? "" : ", ") + s.get<std::string>();
  std::snprintf(buffer, sizeof buffer, "run %s  service %s  %d ranks seen of %d (pipeline %d x data %d)",
                ids.empty() ? "?" : ids.c_str(), services.empty() ? "?" : services.c_str(),
                static_cast<int>(run["ranks"].size()), run["world_size"].get<int>(),
                run["pipeline_parallel_size"].get<int>(), run["data_parallel_size"].get<int>());
  line(buffer);
  const auto& read = f["read"];
  std::snprintf(buffer, sizeof buffer, "read %llu files, %llu spans, %.1f MB", read["files"].get<unsigned long long>(),
                read["spans"].get<unsigned long long>(), read["bytes"].get<double>() / 1e6);
  line(buffer);
  line("");
  line("spans, all ranks (ms)");
  std::snprintf(buffer, sizeof buffer, "  %-46s %9s %10s %10s %10s %10s", "name", "count", "p50", "p90", "p99", "max");
  line(buffer);
  for (const auto& s : f["spans"]) {
    std::snprintf(buffer, sizeof buffer, "  %-46s %9llu %10s %10s %10s %10s", s["name"].get<std::string>().c_str(),
                  s["count"].get<unsigned long long>(), format_ms(s["p50_ms"]).c_str(), format_ms(s["p90_ms"]).c_str(),
                  format_ms(s["p99_ms"]).c_str(), format_ms(s["max_ms"]).c_str());
    line(buffer);
  }
  if (!f["steps"].empty()) {
    line("");
    line("step time per iteration, over ranks (ms)");
    std::snprintf(buffer, sizeof buffer, "  %9s %6s %10s %10s %13s", "iteration", "ranks", "median", "max",
                  "slowest rank");
    line(buffer);
    for (const auto& s : f["steps"]) {
      std::snprintf(buffer, sizeof buffer, "  %9lld %6d %10s %10s %13d", s["iteration"].get<long long>(),
                    s["ranks"].get<int>(), format_ms(s["median_ms"]).c_str(), format_ms(s["max_ms"]).c_str(),
                    s["slowest_rank"].get<int>());
      line(buffer);
    }
  }
  if (!f["loss"].empty()) {
    std::string series;
    const auto& loss = f["loss"];
    const std::size_t n = loss.size(), shown = std::min<std::size_t>(n, 12);
    for (std::size_t i = 0; i < shown; ++i) {
      const std::size_t at = shown == 1 ? 0 : i * (n - 1) / (shown - 1);
      std::snprintf(buffer, sizeof buffer, "%s%lld:%.3f", series.empty() ? "" : " ",
                    loss[at]["iteration"].get<long long>(), loss[at]["loss"].get<double>());
      series += buffer;
    }
    line("");
    line("training loss by iteration (" + std::to_string(n) + " iterations): " + series);
  }
  line("");
  const auto& lost = f["lost"];
  std::snprintf(buffer, sizeof buffer, "lost: %.0f spans dropped, %.0f exported (lens's own counters)",
                lost["spans_dropped"].get<double>(), lost["spans_exported"].get<double>());
  line(buffer);
  for (const auto& p : read["problems"]) {
    std::snprintf(buffer, sizeof buffer, "problem: %s:%llu: %s", p["file"].get<std::string>().c_str(),
                  p["line"].get<unsigned long long>(), p["what"].get<std::string>().c_str());
    line(buffer);
  }
  return out;
}

}  // namespace lens_tools
