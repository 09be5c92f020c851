#include "html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json_escape.h"
#include "span_kinds.h"
#include "text.h"

namespace lens_tools {
namespace {

constexpr double kWidth = 1100;  // the drawing width of every picture (SVG user units)
constexpr double kRow = 14;      // one nesting level of the timeline
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fixed(double v, int digits = 2) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

// A table cell: a whole number without decimals, others with two, "-" for none.
std::string cell(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return fixed(v);
}
std::string cell(const Figure& v) { return v ? cell(*v) : "-"; }

struct Drawn {
  const TimelineSpan* span;
  double y;  // the middle of its row
};

// JSON text safe inside a <script> element: no "</" to end it early.
std::string script_safe(std::string json) {
  for (std::size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 2))
    json.insert(at + 1, "\\");
  return json;
}

// A torch.profiler trace's lane (`--merge`), below its rank's: its complete events within the timeline's range, on
// the rank's clock, a row for each nesting level of each of its threads; each a rect and an entry of the spans' JSON
// as a span is. Returns the lane's height.
template <typename XOf, typename MsOf>
double profile_lane(const MergedProfile& merged, std::int64_t offset, const Timeline& t, XOf x_of, MsOf ms_of, double y,
                    std::string& body, std::string& spans_json, std::size_t& drawn_spans) {
  struct Kept {
    const ProfilerEvent* event;
    std::uint64_t start, end;
  };
  std::vector<Kept> kept;
  for (const ProfilerEvent& e : merged.trace.events) {
    const std::int64_t start = static_cast<std::int64_t>(e.start_ns) + offset;
    const std::int64_t end = start + static_cast<std::int64_t>(e.duration_ns);
    if (e.instant || end <= static_cast<std::int64_t>(t.first_ns) || start >= static_cast<std::int64_t>(t.last_ns))
      continue;
    kept.push_back({&e,
                    static_cast<std::uint64_t>(std::max<std::int64_t>(start, static_cast<std::int64_t>(t.first_ns))),
                    static_cast<std::uint64_t>(std::min<std::int64_t>(end, static_cast<std::int64_t>(t.last_ns)))});
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) {
    return a.event->track != b.event->track ? a.event->track < b.event->track
           : a.start != b.start             ? a.start < b.start
                                            : a.end > b.end;
  });
  std::vector<int> depth(kept.size()), track_rows(merged.trace.tracks.size(), 1);
  std::vector<std::uint64_t> open;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i > 0 && kept[i].event->track != kept[i - 1].event->track) open.clear();
    while (!open.empty() && open.back() <= kept[i].start) open.pop_back();
    depth[i] = static_cast<int>(open.size());
    open.push_back(kept[i].end);
    int& rows = track_rows[static_cast<std::size_t>(kept[i].event->track)];
    rows = std::max(rows, depth[i] + 1);
  }
  std::vector<double> track_top(track_rows.size());
  double rows = 0;
  for (std::size_t k = 0; k < track_rows.size(); ++k) track_top[k] = rows, rows += track_rows[k];
  const double height = rows * kRow + 8;
  body += "<g class=\"rank-lane profile-lane\" data-profile-rank=\"" + std::to_string(merged.rank) +
          "\" transform=\"translate(0," + fixed(y, 1) + ")\"><rect x=\"0\" y=\"0\" width=\"" + fixed(kWidth, 0) +
          "\" height=\"" + fixed(height, 1) + "\" fill=\"#eef2f6\"/><text x=\"4\" y=\"14\" class=\"lane-label\">rank " +
          std::to_string(merged.rank) + " torch.profiler</text><g clip-path=\"url(#plot-clip)\"><g class=\"zoom\">";
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const ProfilerEvent& e = *kept[i].event;
    const double x = x_of(kept[i].start), w = std::max(0.5, x_of(kept[i].end) - x);
    const double top = 4 + (track_top[static_cast<std::size_t>(e.track)] + depth[i]) * kRow;
    const double duration_ms = static_cast<double>(e.duration_ns) / 1e6;
    // Kineto's categories: GPU kernels green, CPU operators (and a trace without categories) brown, the rest grey.
    const char* fill = e.category == "kernel"                                ? "#59a14f"
                       : e.category.empty() || e.category.starts_with("cpu") ? "#9c755f"
                                                                             : "#bab0ac";
    body += "<rect class=\"profiler\" data-i=\"" + std::to_string(drawn_spans) + "\" x=\"" + fixed(x, 2) + "\" y=\"" +
            fixed(top, 1) + "\" width=\"" + fixed(w, 2) + "\" height=\"" + fixed(kRow - 2, 0) + "\" fill=\"" + fill +
            "\"><title>" + escape(e.name) + " " + fixed(duration_ms, 3) + " ms</title></rect>";
    spans_json += std::string(drawn_spans++ == 0 ? "" : ",") + "{\"name\":" + lens::internal::json_string(e.name) +
                  ",\"rank\":" + std::to_string(merged.rank) + ",\"start_ms\":" + fixed(ms_of(kept[i].start), 6) +
                  ",\"duration_ms\":" + fixed(duration_ms, 6) +
                  ",\"attributes\":" + (e.args_json.empty() ? std::string("{}") : e.args_json) + "}";
  }
  body += "</g></g></g>";
  return height + 4;
}

// The timeline: a lane per rank, each span a rect (its index into the spans' JSON, which the page's script shows on a
// click), links as dashed lines, a time axis. The spans and links sit in a group the script scales and moves in x
// (zoom and pan), clipped to the plot; the axis is redrawn for the range in view.
std::string timeline_svg(const Timeline& t, const MergedProfile* merged) {
  std::vector<const TimelineProcess*> order;
  for (const auto& [key, p] : t.processes) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->origin.rank < b->origin.rank; });
  if (order.empty() || t.last_ns <= t.first_ns) return "<p>No spans in the chosen steps.</p>";
  const double span_ns = static_cast<double>(t.last_ns - t.first_ns), label = 150, plot = kWidth - label;
  auto x_of = [&](std::uint64_t ns) { return label + plot * static_cast<double>(ns - t.first_ns) / span_ns; };
  auto ms_of = [&](std::uint64_t ns) { return static_cast<double>(ns - t.first_ns) / 1e6; };
  std::string body, spans_json = "[";
  std::size_t drawn_spans = 0;
  std::unordered_map<std::uint64_t, Drawn> drawn;  // span id -> the span and its row, for link lines
  double y = 0;
  for (std::size_t n = 0; n < order.size(); ++n) {
    const TimelineProcess* p = order[n];
    // Rows: nesting depth within each lane, lanes one below the other.
    std::vector<std::vector<std::uint64_t>> open(static_cast<std::size_t>(std::max(p->lanes, 1)));
    std::vector<int> depth_of(p->spans.size());
    std::vector<int> lane_depth(open.size(), 1);
    for (std::size_t i = 0; i < p->spans.size(); ++i) {
      const TimelineSpan& s = p->spans[i];
      auto& stack = open[static_cast<std::size_t>(s.lane)];
      while (!stack.empty() && stack.back() <= s.start_ns) stack.pop_back();
      depth_of[i] = static_cast<int>(stack.size());
      stack.push_back(s.end_ns);
      lane_depth[static_cast<std::size_t>(s.lane)] =
          std::max(lane_depth[static_cast<std::size_t>(s.lane)], depth_of[i] + 1);
    }
    std::vector<double> lane_top(open.size());
    double rows = 0;
    for (std::size_t l = 0; l < open.size(); ++l) lane_top[l] = rows, rows += lane_depth[l];
    const double height = rows * kRow + 8;
    body += "<g class=\"rank-lane\" data-rank-lane=\"" + std::to_string(p->origin.rank) +
            "\" transform=\"translate(0," + fixed(y, 1) + ")\"><rect x=\"0\" y=\"0\" width=\"" + fixed(kWidth, 0) +
            "\" height=\"" + fixed(height, 1) + "\" fill=\"#f7f7f7\"/><text x=\"4\" y=\"14\" class=\"lane-label\">" +
            escape(rank_process_name(p->origin)) + "</text>";
    if (p->host_lanes < p->lanes)  // the GPU's track: its device spans, below the host's
      body += "<text x=\"4\" y=\"" + fixed(4 + lane_top[static_cast<std::size_t>(p->host_lanes)] * kRow + 10, 1) +
              "\" class=\"lane-label device-label\">device</text>";
    body += "<g clip-path=\"url(#plot-clip)\"><g class=\"zoom\">";
    for (std::size_t i = 0; i < p->spans.size(); ++i) {
      const TimelineSpan& s = p->spans[i];
      const std::string& name = t.names[s.name];
      const double x = x_of(s.start_ns), w = std::max(0.5, x_of(s.end_ns) - x);
      const double top = 4 + (lane_top[static_cast<std::size_t>(s.lane)] + depth_of[i]) * kRow;
      const double duration_ms = static_cast<double>(s.end_ns - s.start_ns) / 1e6;
      body += std::string("<rect") + (s.device ? " class=\"device\"" : "") + " data-i=\"" +
              std::to_string(drawn_spans) + "\" x=\"" + fixed(x, 2) + "\" y=\"" + fixed(top, 1) + "\" width=\"" +
              fixed(w, 2) + "\" height=\"" + fixed(kRow - 2, 0) + "\" fill=\"" +
              colour_of(s.device ? host_of_device_span(name) : name) + "\"><title>" + escape(name) + " " +
              fixed(duration_ms, 3) + " ms</title></rect>";
      spans_json += std::string(drawn_spans++ == 0 ? "" : ",") + "{\"name\":" + lens::internal::json_string(name) +
                    ",\"rank\":" + std::to_string(p->origin.rank) + ",\"start_ms\":" + fixed(ms_of(s.start_ns), 6) +
                    ",\"duration_ms\":" + fixed(duration_ms, 6) + ",\"attributes\":{" + s.args_json + "}}";
      if (s.span_id != 0) drawn[s.span_id] = {&s, y + top + kRow / 2};
    }
    body += "</g></g></g>";
    y += height + 4;
    const bool last_of_rank = n + 1 == order.size() || order[n + 1]->origin.rank != p->origin.rank;
    if (merged != nullptr && last_of_rank && p->origin.rank == merged->rank)
      y += profile_lane(*merged, t.offset_of_rank(merged->rank), t, x_of, ms_of, y, body, spans_json, drawn_spans);
  }
  spans_json += "]";
  // Links between stages: from the linked span (the sender) to the span that links to it, forward in time as the
  // Chrome JSON's arrows (link_arrow).
  std::string links;
  for (const TimelineProcess* p : order)
    for (const TimelineSpan& s : p->spans)
      for (std::uint64_t linked : s.linked_span_ids) {
        auto from = drawn.find(linked);
        auto to = drawn.find(s.span_id);
        if (from == drawn.end() || to == drawn.end()) continue;
        const LinkArrow arrow = link_arrow(*from->second.span, s);
        links += "<line class=\"link\" x1=\"" + fixed(x_of(arrow.from_ns), 2) + "\" y1=\"" + fixed(from->second.y, 1) +
                 "\" x2=\"" + fixed(x_of(arrow.to_ns), 2) + "\" y2=\"" + fixed(to->second.y, 1) + "\"/>";
      }
  // The axis below the lanes: ticks at round times of the range in view (the script redraws them as it changes).
  const double total_ms = span_ns / 1e6;
  std::string axis = "<g class=\"axis-ticks\" transform=\"translate(0," + fixed(y, 1) + ")\">";
  double step = 1;
  while (total_ms / step > 10) step *= total_ms / step > 50 ? 10 : total_ms / step > 20 ? 5 : 2;
  for (double t_ms = 0; t_ms <= total_ms; t_ms += step) {
    const double x = label + plot * t_ms / total_ms;
    axis += "<line class=\"axis\" x1=\"" + fixed(x, 1) + "\" y1=\"0\" x2=\"" + fixed(x, 1) + "\" y2=\"5\"/><text x=\"" +
            fixed(x, 1) + "\" y=\"17\">" + fixed(t_ms, step < 1 ? 1 : 0) + " ms</text>";
  }
  axis += "</g>";
  const double height = y + 22;
  return "<div id=\"timeline-controls\"><button id=\"zoom-in\" type=\"button\">Zoom in</button> <button "
         "id=\"zoom-out\" type=\"button\">Zoom out</button> <button id=\"zoom-reset\" type=\"button\">Whole "
         "range</button> <span id=\"visible-range\" data-from-ms=\"0\" data-to-ms=\"" +
         fixed(total_ms, 6) + "\">0 to " + fixed(total_ms, 3) +
         " ms</span></div><svg class=\"timeline\" id=\"timeline\" data-label=\"" + fixed(label, 0) + "\" data-plot=\"" +
         fixed(plot, 0) + "\" data-total-ms=\"" + fixed(total_ms, 6) + "\" viewBox=\"0 0 " + fixed(kWidth, 0) + " " +
         fixed(height, 1) +
         "\" preserveAspectRatio=\"xMinYMin meet\" style=\"width:100%;max-width:" + fixed(kWidth, 0) +
         "px\"><defs><clipPath id=\"plot-clip\"><rect x=\"" + fixed(label, 0) + "\" y=\"-10\" width=\"" +
         fixed(plot, 0) + "\" height=\"" + fixed(height + 20, 1) + "\"/></clipPath></defs>" + body +
         "<g clip-path=\"url(#plot-clip)\"><g class=\"zoom\">" + links + "</g></g>" + axis +
         "</svg><div id=\"span-details\" hidden></div><script type=\"application/json\" id=\"timeline-spans\">" +
         script_safe(spans_json) + "</script>";
}

// A line chart: one polyline a series (NaN: a gap), y from 0 to the largest value.
std::string line_chart(const std::vector<std::pair<std::string, std::vector<double>>>& series, const std::string& unit,
                       const std::string& id) {
  const double height = 220, left = 60, plot = kWidth - left - 120;
  double top = 0;
  std::size_t n = 0;
  for (const auto& [name, values] : series) {
    n = std::max(n, values.size());
    for (double v : values)
      if (!std::isnan(v)) top = std::max(top, v);
  }
  if (n == 0 || top <= 0) return "<p>No data.</p>";
  std::string svg = "<svg id=\"" + id + "\" class=\"chart\" viewBox=\"0 0 " + fixed(kWidth, 0) + " " +
                    fixed(height + 30, 0) + "\" style=\"width:100%;max-width:" + fixed(kWidth, 0) +
                    "px\"><line x1=\"60\" y1=\"10\" x2=\"60\" y2=\"" + fixed(height + 10, 0) +
                    "\" class=\"axis\"/><text x=\"4\" y=\"16\">" + fixed(top, 2) + " " + unit +
                    "</text><text x=\"4\" y=\"" + fixed(height + 10, 0) + "\">0</text>";
  // Long runs: at most ~2000 points a series, the largest of each stretch (a spike stays visible).
  const std::size_t stride = std::max<std::size_t>(1, (n + 1999) / 2000);
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& values = series[k].second;
    std::string points;
    for (std::size_t i = 0; i < values.size(); i += stride) {
      double v = std::nan("");
      for (std::size_t j = i; j < std::min(values.size(), i + stride); ++j)
        if (!std::isnan(values[j])) v = std::isnan(v) ? values[j] : std::max(v, values[j]);
      if (std::isnan(v)) continue;
      const double x = left + plot * (n == 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(n - 1));
      points += fixed(x, 1) + "," + fixed(10 + height * (1 - v / top), 1) + " ";
    }
    const char* colour = kPalette[k % std::size(kPalette)];
    svg += "<polyline class=\"series\" data-series=\"" + escape(series[k].first) + "\" fill=\"none\" stroke=\"" +
           colour + "\" points=\"" + points + "\"/><text x=\"" + fixed(kWidth - 110, 0) + "\" y=\"" +
           fixed(20 + 14 * static_cast<double>(k), 0) + "\" style=\"fill:" + colour + "\">" + escape(series[k].first) +
           "</text>";
  }
  return svg + "</svg>";
}

std::string table(const std::string& id, const std::vector<std::string>& head,
                  const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table id=\"" + id + "\"><thead><tr>";
  for (const auto& h : head) out += "<th>" + escape(h) + "</th>";
  out += "</tr></thead><tbody>";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const auto& c : row) out += "<td>" + escape(c) + "</td>";
    out += "</tr>";
  }
  return out + "</tbody></table>";
}

std::string phases_section(const PhaseFigures& phases) {
  std::vector<std::string> head = {"rank", "steps", "step ms"};
  for (const char* name : kPhaseNames) head.push_back(std::string(name) + " ms");
  head.push_back("other ms");
  const auto& d = phases.mean_per_step.device_phase_ms;
  const bool device = std::any_of(d.begin(), d.end(), [](const Figure& f) { return f.has_value(); });
  if (device)
    for (const char* name : kPhaseNames)
      head.push_back(std::string(name) + " device ms"), head.push_back(std::string(name) + " overhead ms");
  std::vector<std::vector<std::string>> rows;
  auto row_of = [&](const std::string& who, const PhaseRow& r) {
    std::vector<std::string> row = {who, cell(r.steps), cell(r.step_ms)};
    for (const Figure& phase : r.phase_ms) row.push_back(cell(phase));
    row.push_back(cell(r.other_ms));
    if (device)
      for (int k = 0; k < kPhaseCount; ++k)
        row.push_back(cell(r.device_phase_ms[k])), row.push_back(cell(r.launch_overhead_ms[k]));
    rows.push_back(row);
  };
  for (const auto& [rank, r] : phases.per_rank) row_of(std::to_string(rank), r);
  row_of("all", phases.mean_per_step);
  std::string notes;
  for (int k = 0; k < kPhaseCount; ++k)
    if (!phases.not_measured[k].empty())
      notes += "<p class=\"not-measured\">" + escape(kPhaseNames[k]) +
               " not measured (-): " + escape(phases.not_measured[k]) + "</p>";
  return table("phases", head, rows) + notes;
}

std::string stragglers_section(const StragglerFigures& stragglers) {
  std::vector<std::vector<std::string>> rows;
  for (const StragglerRow& r : stragglers.ranks)
    rows.push_back({std::to_string(r.rank), std::to_string(r.stage), std::to_string(r.steps_scored),
                    std::to_string(r.steps_flagged), fixed(r.share), cell(r.score), cell(r.compute_ms_median),
                    cell(r.stage_compute_ms_median), cell(r.wait_ms_median), cell(r.stage_wait_ms_median)});
  std::string named;
  for (const StragglerRow& r : stragglers.named) named += (named.empty() ? "" : ", ") + std::to_string(r.rank);
  const std::string verdict = !stragglers.not_scored.empty() ? "not scored: " + escape(stragglers.not_scored)
                              : named.empty()                ? std::string("none")
                                                             : "rank " + named;
  return "<p class=\"verdict\">Stragglers named: " + verdict + "</p>" +
         table("stragglers",
               {"rank", "stage", "steps scored", "steps flagged", "share", "score", "compute ms", "peers' compute ms",
                "wait ms", "peers' wait ms"},
               rows);
}

// Goodput (CONTRACT §10): the share of wall time in steps that count, and where the rest went.
std::string goodput_section(const GoodputFigures& g) {
  if (!g.not_measured.empty()) return "<p class=\"not-measured\">Not measured: " + escape(g.not_measured) + "</p>";
  auto seconds = [](double s) { return fixed(s); };
  const std::vector<std::vector<std::string>> rows = {
      {"steps that count (goodput)", seconds(g.goodput_s), fixed(100 * g.share)},
      {"startup", seconds(g.startup_s), fixed(g.wall_s > 0 ? 100 * g.startup_s / g.wall_s : 0)},
      {"checkpoints", seconds(g.checkpoint_s), fixed(g.wall_s > 0 ? 100 * g.checkpoint_s / g.wall_s : 0)},
      {"evaluation", seconds(g.evaluation_s), fixed(g.wall_s > 0 ? 100 * g.evaluation_s / g.wall_s : 0)},
      {"restarts", seconds(g.restarts_s), fixed(g.wall_s > 0 ? 100 * g.restarts_s / g.wall_s : 0)},
      {"iterations redone (" + std::to_string(g.redone_iterations) + ")", seconds(g.redone_s),
       fixed(g.wall_s > 0 ? 100 * g.redone_s / g.wall_s : 0)},
      {"other", seconds(g.other_s), fixed(g.wall_s > 0 ? 100 * g.other_s / g.wall_s : 0)}};
  return "<p class=\"goodput\">Rank " + std::to_string(g.rank) + ", " + std::to_string(g.attempts) +
         (g.attempts == 1 ? " process" : " processes") + ", " + fixed(g.wall_s) + " s wall.</p>" +
         table("goodput", {"where the time went", "s", "% of wall"}, rows);
}

// Hosts' clock offsets (clocks.h): what the timeline and the bubble were corrected by, and what cannot be bounded.
std::string clocks_section(const ClockFigures& clocks) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(clocks.hosts.size());
  for (const HostClock& h : clocks.hosts)
    rows.push_back({h.host, cell(h.offset_ms), cell(h.at_least_ms), cell(h.at_most_ms), std::to_string(h.links)});
  std::string note = "<p class=\"clocks\">Against " + escape(clocks.reference) +
                     "'s clock, from the links between "
                     "hosts' spans" +
                     (clocks.corrected ? "; the timeline and the bubble use corrected times" : "") + ".</p>";
  if (!clocks.not_bounded.empty())
    note += "<p class=\"not-bounded\">Not bounded, so what compares these hosts' times may be off: " +
            escape(clocks.not_bounded) + "</p>";
  return note + table("clocks", {"host", "offset ms", "at least ms", "at most ms", "links"}, rows);
}

std::string bubble_section(const std::vector<BubbleRow>& bubble) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(bubble.size());
  for (const BubbleRow& b : bubble)
    rows.push_back({std::to_string(b.stage), cell(b.microbatches), b.measured ? fixed(100 * *b.measured) : "-",
                    b.theoretical ? fixed(100 * *b.theoretical) : "-"});
  std::string note;
  if (!bubble.empty() && !bubble.front().not_measured.empty())
    note = "<p class=\"not-measured\">measured: " + escape(bubble.front().not_measured) + "</p>";
  return table("bubble", {"stage", "micro-batches", "measured %", "theoretical %"}, rows) + note;
}

std::string spans_section(const std::vector<SpanFigures>& spans) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(spans.size());
  const bool device =
      std::any_of(spans.begin(), spans.end(), [](const SpanFigures& s) { return s.device.has_value(); });
  for (const SpanFigures& s : spans) {
    rows.push_back({s.name, std::to_string(s.count), cell(s.p50_ms), cell(s.p90_ms), cell(s.p99_ms), cell(s.max_ms)});
    if (device && s.device)
      rows.back().insert(rows.back().end(),
                         {cell(s.device->p50_ms), cell(s.device->max_ms), cell(s.launch_overhead_ms)});
    else if (device)
      rows.back().insert(rows.back().end(), 3, cell(Figure{}));
  }
  std::vector<std::string> head = {"name", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"};
  if (device) head.insert(head.end(), {"device p50 ms", "device max ms", "launch overhead ms"});
  return table("spans", head, rows);
}

constexpr const char* kStyle =
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}svg text{font-size:11px;fill:#333}.lane-label{font-weight:600}"
    ".link{stroke:#222;stroke-width:1;stroke-dasharray:3 "
    "2;vector-effect:non-scaling-stroke}.axis{stroke:#999}.series{stroke-width:1.5}"
    "pre{background:#f7f7f7;padding:8px}";

// The timeline's zoom (buttons, the wheel), pan (drag) and a click's details, written for this page: no library, no
// request. The range in view is #visible-range's data-from-ms / data-to-ms, from the first span shown.
constexpr const char* kScript = R"JS(
(function () {
  const svg = document.getElementById('timeline');
  if (!svg) return;
  const NS = 'http://www.w3.org/2000/svg';
  const label = Number(svg.dataset.label), plot = Number(svg.dataset.plot), total = Number(svg.dataset.totalMs);
  const spans = JSON.parse(document.getElementById('timeline-spans').textContent);
  const groups = svg.querySelectorAll('g.zoom');
  const ticks = svg.querySelector('g.axis-ticks');
  const range = document.getElementById('visible-range');
  const details = document.getElementById('span-details');
  let from = 0, to = total;
  const msAt = (x) => from + (to - from) * (x - label) / plot;
  function tickStep(width) {
    let step = Math.pow(10, Math.floor(Math.log10(width)));
    while (width / step < 5) step /= width / (step / 2) >= 5 ? 2 : 5;
    return step;
  }
  function draw() {
    const k = total / (to - from);
    const tx = label - label * k - plot * from * k / total;
    for (const g of groups) g.setAttribute('transform', `translate(${tx},0) scale(${k},1)`);
    const step = tickStep(to - from), digits = Math.max(0, -Math.floor(Math.log10(step)));
    ticks.replaceChildren();
    for (let t = Math.ceil(from / step) * step; t <= to + step * 1e-9; t += step) {
      const x = label + plot * (t - from) / (to - from);
      const line = document.createElementNS(NS, 'line');
      for (const [k2, v] of [['class', 'axis'], ['x1', x], ['x2', x], ['y1', 0], ['y2', 5]]) line.setAttribute(k2, v);
      const text = document.createElementNS(NS, 'text');
      text.setAttribute('x', x);
      text.setAttribute('y', 17);
      text.textContent = `${t.toFixed(digits)} ms`;
      ticks.append(line, text);
    }
    range.dataset.fromMs = from;
    range.dataset.toMs = to;
    range.textContent = `${from.toFixed(3)} to ${to.toFixed(3)} ms`;
  }
  function view(newFrom, width) {
    width = Math.min(total, Math.max(width, total * 1e-6));
    from = Math.min(Math.max(0, newFrom), total - width);
    to = from + width;
    draw();
  }
  const zoom = (factor, centre) => view(centre - (centre - from) / factor, (to - from) / factor);
  document.getElementById('zoom-in').addEventListener('click', () => zoom(2, (from + to) / 2));
  document.getElementById('zoom-out').addEventListener('click', () => zoom(0.5, (from + to) / 2));
  document.getElementById('zoom-reset').addEventListener('click', () => view(0, total));
  const svgX = (event) => {
    const p = svg.createSVGPoint();
    p.x = event.clientX;
    p.y = event.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse()).x;
  };
  svg.addEventListener('wheel', (event) => {
    const x = svgX(event);
    if (x < label) return;
    event.preventDefault();
    zoom(event.deltaY < 0 ? 1.25 : 0.8, msAt(x));
  }, {passive: false});
  let drag = null;
  svg.addEventListener('pointerdown', (event) => {
    drag = {x: svgX(event), from, moved: false};
  });
  svg.addEventListener('pointermove', (event) => {
    if (!drag) return;
    const dx = svgX(event) - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (drag.moved) view(drag.from - dx / plot * (to - from), to - from);
  });
  svg.addEventListener('pointerup', (event) => {
    const clicked = drag && !drag.moved ? event.target.closest('rect[data-i]') : null;
    drag = null;
    if (clicked) show(spans[Number(clicked.dataset.i)]);
  });
  function show(span) {
    const rows = [['name', span.name], ['rank', span.rank], ['start', `${span.start_ms.toFixed(3)} ms`],
                  ['duration', `${span.duration_ms.toFixed(3)} ms`],
                  ...Object.entries(span.attributes).map(([k, v]) => [k, typeof v === 'object' ? JSON.stringify(v) : v])];
    const table = document.createElement('table');
    table.id = 'span-attributes';
    for (const [k, v] of rows) {
      const tr = table.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = String(v);
    }
    details.replaceChildren(table);
    details.hidden = false;
  }
  draw();
})();
)JS";

}  // namespace

std::string render_html(const Figures& f, const Timeline& timeline, const std::string& steps_shown,
                        const MergedProfile* merged) {
  std::string ids;
  for (const std::string& id : f.run.run_ids) ids += (ids.empty() ? "" : ", ") + id;
  std::string page =
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>lens report: " + escape(ids) +
      "</title><style>" + kStyle + "</style></head><body>";
  page += "<h1>lens report: run " + escape(ids) + "</h1><p id=\"identity\">" + std::to_string(f.run.ranks.size()) +
          " ranks seen of " + std::to_string(f.run.world_size) + " (tensor " +
          std::to_string(f.run.tensor_parallel_size) + " x pipeline " + std::to_string(f.run.pipeline_parallel_size) +
          " x data " + std::to_string(f.run.data_parallel_size) + "), " + std::to_string(f.read.spans) +
          " spans read</p>";
  page +=
      "<h2>Timeline of iterations " + escape(steps_shown) +
      "</h2><p>One lane per rank; blue forward, orange backward, red pipeline receive, purple gradient sync, yellow "
      "tensor-parallel all-reduce, green optimizer; dashed lines: links from a sending stage to the receiving one; "
      "under \"device\", what the rank's GPU "
      "ran for its device-timed spans (docs/GPU.md). Zoom with the buttons or the mouse wheel, drag to pan; hover a "
      "span for its name and duration, click it for its attributes.</p>" +
      timeline_svg(timeline, merged);
  std::vector<std::pair<std::string, std::vector<double>>> compute_series;  // in rank order
  for (const auto& [rank, values] : f.compute_ms_by_rank) {
    std::vector<double> v;
    for (const Figure& x : values) v.push_back(x.value_or(std::nan("")));
    compute_series.emplace_back("rank " + std::to_string(rank), v);
  }
  // Compute, not step time: every rank's step lasts about as long as the slowest's, but a straggler computes longer.
  page +=
      "<h2>Compute per step per rank over the run</h2><p>Each rank's forward and backward per iteration (ms): "
      "the ranks a straggler makes wait show the same step time, but not the same compute.</p>";
  page += f.compute_ms_by_rank.empty() || !f.phases.not_measured[kForward].empty()
              ? "<p class=\"not-measured\">Not measured: " + escape(f.phases.not_measured[kForward]) + "</p>"
              : line_chart(compute_series, "ms", "compute");
  std::vector<double> loss;
  for (const LossPoint& l : f.loss) loss.push_back(l.loss);
  page += "<h2>Loss over the run</h2>" + line_chart({{"loss", loss}}, "", "loss");
  page += "<h2>Where a step's time goes (mean per step, ms)</h2>" + phases_section(f.phases);
  page += "<h2>Stragglers</h2>" + stragglers_section(f.stragglers);
  page += "<h2>Goodput</h2>" + goodput_section(f.goodput);
  if (!f.clocks.reference.empty()) page += "<h2>Clocks of the hosts</h2>" + clocks_section(f.clocks);
  page += "<h2>Pipeline bubble</h2>" + bubble_section(f.bubble);
  page += "<h2>Spans, all ranks</h2>" + spans_section(f.spans);
  page += "<details><summary>The text report</summary><pre>" + escape(render_text(f)) + "</pre></details><script>" +
          kScript + "</script></body></html>\n";
  return page;
}

}  // namespace lens_tools
