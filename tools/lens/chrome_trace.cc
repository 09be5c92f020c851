#include "chrome_trace.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/json_escape.h"

namespace lens_tools {
namespace {

// A file written plain or gzip (zlib's gzwrite), with one buffer in between.
class Output {
 public:
  explicit Output(const std::string& path) : path_(path) {
    const bool gz = path.size() > 3 && path.ends_with(".gz");
    file_ = gzopen(path.c_str(), gz ? "wb6" : "wbT");  // T: no compression, a plain file
    if (file_ == nullptr) throw std::runtime_error("cannot write " + path);
  }
  ~Output() {
    if (file_ != nullptr) gzclose(file_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  std::string& buffer() { return buffer_; }
  void flush_if_full() {
    if (buffer_.size() >= (1 << 20)) flush();
  }
  void close() {
    flush();
    // The stream is closed once, whatever gzclose says (it frees the stream even when the last write fails, as
    // on a full disk): the destructor must not close it again.
    gzFile file = std::exchange(file_, nullptr);
    if (gzclose(file) != Z_OK) throw std::runtime_error("cannot finish writing " + path_ + " (is the disk full?)");
  }

 private:
  void flush() {
    if (!buffer_.empty() && gzwrite(file_, buffer_.data(), static_cast<unsigned>(buffer_.size())) == 0)
      throw std::runtime_error("cannot write " + path_ + " (is the disk full?)");
    buffer_.clear();
  }
  std::string path_, buffer_;
  gzFile file_ = nullptr;
};

// Microseconds since the timeline's first span, exact to the nanosecond (no floating point on the way).
std::string micros(std::uint64_t ns, std::uint64_t origin) {
  const std::uint64_t d = ns - origin;
  char text[32];
  std::snprintf(text, sizeof text, "%llu.%03llu", static_cast<unsigned long long>(d / 1000),
                static_cast<unsigned long long>(d % 1000));
  return text;
}

std::string hex_id(std::uint64_t id) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

struct Place {
  int pid, tid;
  const TimelineSpan* span;
};

// Every event's category: viewers bind a flow to the span at its end only when the two share pid, tid, ts and
// category (the DevTools trace engine), and filter by category.
constexpr const char* kCategory = "lens";

// The trace's time origin as ISO 8601 UTC to the millisecond: the DevTools trace format's metadata.startTime.
std::string iso8601_utc(std::uint64_t unix_ns) {
  const auto seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03lluZ", static_cast<unsigned long long>(unix_ns / 1'000'000 % 1000));
  return text;
}

// One end of flow `id`: "s" where it leaves, "f" where it arrives (bound to the span that starts there).
// The host's lanes, then the device's (the GPU's track, below the host's).
std::string lane_name(int lane, int host_lanes) {
  if (lane < host_lanes) return lane == 0 ? "spans" : "overlapping spans " + std::to_string(lane);
  return lane == host_lanes ? "device" : "device, overlapping " + std::to_string(lane - host_lanes);
}

std::string flow_event(const char* phase, const std::string& id, int pid, int tid, const std::string& ts) {
  return std::string("{\"ph\":\"") + phase + "\"," + (phase[0] == 'f' ? "\"bp\":\"e\"," : "") + "\"cat\":\"" +
         kCategory + "\",\"name\":\"link\",\"id\":" + id + ",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + ts + "}";
}

std::uint64_t shifted(std::uint64_t ns, std::int64_t offset) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, static_cast<std::int64_t>(ns) + offset));
}

// The profile's events as process `pid`, `rank R torch.profiler`, a thread for each of its tracks.
void write_profile(const MergedProfile& merged, std::int64_t offset, std::uint64_t origin, int pid, int sort_index,
                   const std::function<void(const std::string&)>& event) {
  const std::string p = std::to_string(pid);
  std::string name = "rank " + std::to_string(merged.rank) + " torch.profiler";
  event("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + p + ",\"args\":{\"name\":" +
        lens::internal::json_string(name) + ",\"file\":" + lens::internal::json_string(merged.trace.path) + "}}");
  event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + p +
        ",\"args\":{\"sort_index\":" + std::to_string(sort_index) + "}}");
  for (std::size_t t = 0; t < merged.trace.tracks.size(); ++t)
    event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + p + ",\"tid\":" + std::to_string(t + 1) +
          ",\"args\":{\"name\":" + lens::internal::json_string(merged.trace.tracks[t]) + "}}");
  for (const ProfilerEvent& e : merged.trace.events) {
    const std::uint64_t start = shifted(e.start_ns, offset);
    std::string text = "{\"ph\":\"";
    text += e.instant ? "i\",\"s\":\"t" : "X";
    text += "\",\"cat\":" + lens::internal::json_string(e.category.empty() ? "torch.profiler" : e.category);
    text += ",\"pid\":" + p + ",\"tid\":" + std::to_string(e.track + 1) + ",\"ts\":" + micros(start, origin);
    if (!e.instant) text += ",\"dur\":" + micros(start + e.duration_ns, start);
    text += ",\"name\":" + lens::internal::json_string(e.name);
    if (!e.args_json.empty()) text += ",\"args\":" + e.args_json;
    event(text + "}");
  }
}

}  // namespace

std::size_t write_chrome_trace(const Timeline& timeline, const std::string& path, const MergedProfile* merged) {
  // Processes in rank order; a second process of a rank (its checkpoint worker, or a resumed run) says its pid.
  std::vector<const TimelineProcess*> order;
  std::map<int, int> per_rank;
  for (const auto& [key, p] : timeline.processes) {
    order.push_back(&p);
    ++per_rank[p.origin.rank];
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->origin.rank < b->origin.rank; });
  const std::int64_t merged_offset = merged != nullptr ? timeline.offset_of_rank(merged->rank) : 0;
  std::uint64_t origin = timeline.first_ns;
  if (merged != nullptr) origin = std::min(origin, shifted(merged->trace.first_ns, merged_offset));
  if (origin == UINT64_MAX) origin = 0;
  std::unordered_map<std::uint64_t, Place> where;  // span id -> its track, for flow arrows
  for (std::size_t i = 0; i < order.size(); ++i)
    for (const TimelineSpan& s : order[i]->spans)
      if (s.span_id != 0) where[s.span_id] = {static_cast<int>(i + 1), s.lane + 1, &s};

  Output out(path);
  std::string& b = out.buffer();
  std::size_t events = 0;
  // Times are microseconds from the first span (three decimals: nanoseconds, within a double's precision); the
  // metadata says when that was, so that traces of other sources can be aligned to it.
  b += "{\"displayTimeUnit\":\"ms\",\"baseTimeNanoseconds\":" + std::to_string(origin) +
       ",\"metadata\":{\"startTime\":\"" + iso8601_utc(origin) + "\",\"lens.time_origin_unix_nano\":\"" +
       std::to_string(origin) + "\"},\"traceEvents\":[\n";
  auto event = [&](const std::string& text) {
    if (events++ > 0) b += ",\n";
    b += text;
    out.flush_if_full();
  };
  std::uint64_t flow = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const TimelineProcess& p = *order[i];
    const std::string pid = std::to_string(i + 1);
    std::string name = rank_process_name(p.origin);
    if (per_rank[p.origin.rank] > 1) name += " pid " + std::to_string(p.origin.pid);
    std::string meta = "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"args\":{\"name\":";
    meta += lens::internal::json_string(name);
    if (!p.origin.resource_args.empty()) meta += "," + p.origin.resource_args;
    event(meta + "}}");
    event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid +
          ",\"args\":{\"sort_index\":" + std::to_string(2 * (i + 1)) + "}}");
    for (int lane = 0; lane < p.lanes; ++lane) {
      const std::string track = "\"pid\":" + pid + ",\"tid\":" + std::to_string(lane + 1);
      std::string thread_name = "{\"ph\":\"M\",\"name\":\"thread_name\",";
      event(thread_name.append(track)
                .append(",\"args\":{\"name\":\"")
                .append(lane_name(lane, p.host_lanes))
                .append("\"}}"));
      std::string sort_index = "{\"ph\":\"M\",\"name\":\"thread_sort_index\",";
      event(
          sort_index.append(track).append(",\"args\":{\"sort_index\":").append(std::to_string(lane + 1)).append("}}"));
    }
    for (const TimelineSpan& s : p.spans) {
      const std::string tid = std::to_string(s.lane + 1);
      std::string e = "{\"ph\":\"X\",\"cat\":\"";
      e.append(kCategory).append("\",\"pid\":").append(pid).append(",\"tid\":").append(tid);
      e.append(",\"ts\":").append(micros(s.start_ns, origin)).append(",\"dur\":").append(micros(s.end_ns, s.start_ns));
      e.append(",\"name\":");
      e += lens::internal::json_string(timeline.names[s.name]);
      e += ",\"args\":{";
      if (!s.args_json.empty()) e += s.args_json + ",";
      e += "\"span_id\":\"" + hex_id(s.span_id) + "\"";
      if (s.parent_span_id != 0) e += ",\"parent_span_id\":\"" + hex_id(s.parent_span_id) + "\"";
      event(e + "}}");
      for (std::uint64_t linked : s.linked_span_ids) {
        auto from = where.find(linked);
        if (from == where.end()) continue;  // the linked span is outside the output: no half arrow
        const LinkArrow arrow = link_arrow(*from->second.span, s);
        const std::string id = std::to_string(++flow);
        const std::string to_ts = micros(arrow.to_ns, origin);
        if (arrow.arrival) {
          std::string arrival = "{\"ph\":\"X\",\"cat\":\"";
          arrival.append(kCategory).append("\",\"pid\":").append(pid).append(",\"tid\":").append(tid);
          arrival.append(",\"ts\":")
              .append(to_ts)
              .append(",\"dur\":0,\"name\":\"arrival\",\"args\":{\"from_span_id\":\"");
          event(arrival.append(hex_id(linked)).append("\"}}"));
        }
        // Both ends at the start of the span they bind to, as viewers expect.
        event(flow_event("s", id, from->second.pid, from->second.tid, micros(arrow.from_ns, origin)));
        event(flow_event("f", id, static_cast<int>(i + 1), s.lane + 1, to_ts));
      }
    }
    const bool last_of_rank = i + 1 == order.size() || order[i + 1]->origin.rank != p.origin.rank;
    if (merged != nullptr && last_of_rank && p.origin.rank == merged->rank)  // right below the rank's own
      write_profile(*merged, merged_offset, origin, static_cast<int>(order.size() + 1), 2 * static_cast<int>(i + 1) + 1,
                    event);
  }
  b += "\n]}\n";
  out.close();
  return events;
}

}  // namespace lens_tools
