#include "timeline.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

#include "span_kinds.h"

namespace lens_tools {

LinkArrow link_arrow(const TimelineSpan& sender, const TimelineSpan& receiver) {
  LinkArrow a{.from_ns = sender.start_ns, .to_ns = receiver.start_ns};
  if (receiver.start_ns >= sender.start_ns) return a;
  const std::uint64_t arrived = std::min(sender.end_ns, receiver.end_ns);
  // Clocks that disagree (the receiver ended before the send began), or a send of no duration that ended it: no
  // point of the receiver is after the send (an arrow of no length is no arrow to a viewer).
  if (arrived <= sender.start_ns) return a;
  a.to_ns = arrived;
  a.arrival = true;
  return a;
}

std::int64_t Timeline::offset_of_rank(int rank) const {
  for (const auto& [key, p] : processes)
    if (p.origin.rank == rank) return clocks.corrected ? clocks.offset_ns(p.origin.host) : 0;
  throw std::runtime_error("rank " + std::to_string(rank) + " has no span in the run's timeline (--merge-rank)");
}

bool Timeline::kept(const std::string& key, const SpanRow& s) const {
  if (windows_.empty()) return true;
  auto it = windows_.find(key);
  if (it == windows_.end()) return false;
  // A device span runs behind the host: it belongs to the step it starts in.
  const bool device = !host_of_device_span(s.name).empty();
  return std::any_of(it->second.begin(), it->second.end(), [&](const StepWindow& w) {
    return s.start_ns >= w.start_ns && (device ? s.start_ns : s.end_ns) <= w.end_ns;
  });
}

std::uint32_t Timeline::name_index(std::string_view name) {
  auto it = name_ids_.find(name);
  if (it != name_ids_.end()) return it->second;
  names.emplace_back(name);
  const auto id = static_cast<std::uint32_t>(names.size() - 1);
  name_ids_.emplace(std::string(name), id);
  return id;
}

void Timeline::span(const SpanRow& s) {
  if (!known_clocks_) clock_links_.add(s);  // every span's, kept or not: the offsets are the run's
  std::string key = process_key(*s.origin);
  if (!kept(key, s)) return;
  TimelineProcess& p = processes[key];
  if (p.spans.empty()) p.origin = *s.origin;
  TimelineSpan& t = p.spans.emplace_back();
  t.name = name_index(s.name);
  t.start_ns = s.start_ns;
  t.end_ns = std::max(s.start_ns, s.end_ns);
  t.span_id = parse_span_id(s.span_id);
  t.parent_span_id = parse_span_id(s.parent_span_id);
  for (std::string_view link : s.linked_span_ids) t.linked_span_ids.push_back(parse_span_id(link));
  t.args_json = s.args_json;
  t.device = !host_of_device_span(s.name).empty();
  first_ns = std::min(first_ns, t.start_ns);
  last_ns = std::max(last_ns, t.end_ns);
}

void Timeline::lay_out() {
  clocks = known_clocks_ ? *known_clocks_ : clock_links_.estimate();
  if (clocks.corrected) {
    first_ns = UINT64_MAX, last_ns = 0;
    for (auto& [key, p] : processes) {
      const std::int64_t offset = clocks.offset_ns(p.origin.host);
      for (TimelineSpan& s : p.spans) {
        s.start_ns =
            static_cast<std::uint64_t>(std::max<std::int64_t>(0, static_cast<std::int64_t>(s.start_ns) + offset));
        s.end_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, static_cast<std::int64_t>(s.end_ns) + offset));
        first_ns = std::min(first_ns, s.start_ns);
        last_ns = std::max(last_ns, s.end_ns);
      }
    }
  }
  for (auto& [key, p] : processes) {
    // Parents first: by start, then the longer first, so that a span's enclosing spans precede it.
    std::sort(p.spans.begin(), p.spans.end(), [](const TimelineSpan& a, const TimelineSpan& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    // Each lane is a stack of the spans open on it; a span goes to the first lane where it nests in what is open.
    // The host's lanes and the device's apart; the device's follow the host's.
    std::vector<std::vector<std::uint64_t>> host_ends, device_ends;
    for (TimelineSpan& s : p.spans) {
      auto& open_ends = s.device ? device_ends : host_ends;
      std::size_t lane = 0;
      for (;; ++lane) {
        if (lane == open_ends.size()) open_ends.emplace_back();
        auto& stack = open_ends[lane];
        while (!stack.empty() && stack.back() <= s.start_ns) stack.pop_back();
        if (stack.empty() || s.end_ns <= stack.back()) break;
      }
      open_ends[lane].push_back(s.end_ns);
      s.lane = static_cast<int>(lane);
    }
    p.host_lanes = static_cast<int>(host_ends.size());
    p.lanes = p.host_lanes + static_cast<int>(device_ends.size());
    for (TimelineSpan& s : p.spans)
      if (s.device) s.lane += p.host_lanes;
  }
}

std::string rank_process_name(const Origin& o) {
  // Sizes are within [1, kMaxRanks] (run_reader): products of two fit in int64.
  const std::int64_t tensor = std::max(1, o.tensor_size), pipeline = std::max(1, o.pipeline_size);
  const std::int64_t data =
      o.data_parallel_size > 0 ? o.data_parallel_size : std::max<std::int64_t>(1, o.world_size / (tensor * pipeline));
  const std::int64_t rank = std::max(0, o.rank);
  return "rank " + std::to_string(rank) + " (pp " + std::to_string(rank / (tensor * data)) + ", dp " +
         std::to_string(rank / tensor % data) + ")";
}

}  // namespace lens_tools
