#include "chrome_trace.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <utility>

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
  std::uint64_t start_ns;
};

}  // namespace

std::string rank_process_name(const Origin& o) {
  // Sizes are within [1, kMaxRanks] (run_reader): products of two fit in int64.
  const std::int64_t tensor = std::max(1, o.tensor_size), pipeline = std::max(1, o.pipeline_size);
  const std::int64_t data =
      o.data_parallel_size > 0 ? o.data_parallel_size : std::max<std::int64_t>(1, o.world_size / (tensor * pipeline));
  const std::int64_t rank = std::max(0, o.rank);
  return "rank " + std::to_string(rank) + " (pp " + std::to_string(rank / (tensor * data)) + ", dp " +
         std::to_string(rank / tensor % data) + ")";
}

std::size_t write_chrome_trace(const Timeline& timeline, const std::string& path) {
  // Processes in rank order; a second process of a rank (its checkpoint worker, or a resumed run) says its pid.
  std::vector<const TimelineProcess*> order;
  std::map<int, int> per_rank;
  for (const auto& [key, p] : timeline.processes) {
    order.push_back(&p);
    ++per_rank[p.origin.rank];
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->origin.rank < b->origin.rank; });
  const std::uint64_t origin = timeline.first_ns == UINT64_MAX ? 0 : timeline.first_ns;
  std::unordered_map<std::uint64_t, Place> where;  // span id -> its track, for flow arrows
  for (std::size_t i = 0; i < order.size(); ++i)
    for (const TimelineSpan& s : order[i]->spans)
      if (s.span_id != 0) where[s.span_id] = {static_cast<int>(i + 1), s.lane + 1, s.start_ns};

  Output out(path);
  std::string& b = out.buffer();
  std::size_t events = 0;
  b += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
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
    append_json_string(meta, name);
    if (!p.origin.resource_args.empty()) meta += "," + p.origin.resource_args;
    event(meta + "}}");
    event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid +
          ",\"args\":{\"sort_index\":" + std::to_string(i + 1) + "}}");
    for (int lane = 0; lane < p.lanes; ++lane)
      event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(lane + 1) +
            ",\"args\":{\"name\":\"" +
            (lane == 0 ? std::string("spans") : "overlapping spans " + std::to_string(lane)) + "\"}}");
    for (const TimelineSpan& s : p.spans) {
      const std::string tid = std::to_string(s.lane + 1), ts = micros(s.start_ns, origin);
      std::string e = "{\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + tid + ",\"ts\":" + ts +
                      ",\"dur\":" + micros(s.end_ns, s.start_ns) + ",\"name\":";
      append_json_string(e, timeline.names[s.name]);
      e += ",\"args\":{";
      if (!s.args_json.empty()) e += s.args_json + ",";
      e += "\"span_id\":\"" + hex_id(s.span_id) + "\"";
      if (s.parent_span_id != 0) e += ",\"parent_span_id\":\"" + hex_id(s.parent_span_id) + "\"";
      event(e + "}}");
      for (std::uint64_t linked : s.linked_span_ids) {
        auto from = where.find(linked);
        if (from == where.end()) continue;  // the linked span is outside the output: no half arrow
        const std::string id = std::to_string(++flow);
        event("{\"ph\":\"s\",\"cat\":\"link\",\"name\":\"link\",\"id\":" + id +
              ",\"pid\":" + std::to_string(from->second.pid) + ",\"tid\":" + std::to_string(from->second.tid) +
              ",\"ts\":" + micros(from->second.start_ns, origin) + "}");
        event("{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"link\",\"name\":\"link\",\"id\":" + id + ",\"pid\":" + pid +
              ",\"tid\":" + tid + ",\"ts\":" + ts + "}");
      }
    }
  }
  b += "\n]}\n";
  out.close();
  return events;
}

}  // namespace lens_tools
