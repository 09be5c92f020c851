#include "run_reader.h"

#include <simdjson.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>

#include "common/json_escape.h"

namespace lens_tools {
namespace {

// A rank or a parallel size from a file: within [lowest, kMaxRanks], else `unknown` (a product of two sizes that
// overflowed an int made the tools divide by zero).
int rank_number(std::int64_t value, std::int64_t lowest, int unknown) {
  return value >= lowest && value <= kMaxRanks ? static_cast<int>(value) : unknown;
}

namespace fs = std::filesystem;
using simdjson::ondemand::array;
using simdjson::ondemand::object;
using simdjson::ondemand::value;

// Whether a .json file begins as an OTLP/JSON request does ({"resourceSpans", {"resourceMetrics", ...).
bool begins_as_otlp(const fs::path& p) {
  gzFile file = gzopen(p.c_str(), "rb");
  if (file == nullptr) return false;
  char head[64] = {};
  const int n = gzread(file, head, sizeof head - 1);
  gzclose(file);
  std::string_view text(head, n > 0 ? static_cast<std::size_t>(n) : 0);
  text.remove_prefix(std::min(text.find_first_not_of(" \t\r\n"), text.size()));
  return text.starts_with("{\"resource");
}

// In a directory: OTLP/JSON Lines files (lens's, a Collector's), plain or gzip; a .json file only when it is OTLP.
// What lens writes beside its telemetry is left alone: hang snapshots, control.json, a converted Chrome trace.
bool is_telemetry_file(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  if (name == "control.json" || name.ends_with(".snapshot.json")) return false;
  if (name.ends_with(".jsonl")) return true;
  return name.ends_with(".json") && begins_as_otlp(p);
}

// Lines of a plain or gzip file (zlib reads a plain file as it is).
class LineReader {
 public:
  explicit LineReader(const std::string& path) : file_(gzopen(path.c_str(), "rb")) {
    if (file_ != nullptr) gzbuffer(file_, 1 << 17);
  }
  ~LineReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool ok() const { return file_ != nullptr; }
  std::uint64_t bytes() const { return bytes_; }
  // Why reading stopped before the end (a truncated or corrupt gzip stream); empty when it reached the end.
  const std::string& error() const { return error_; }

  // The next line, without its newline; false at the end. `complete` is false for a last line with no newline.
  // A line longer than kMaxLineBytes is read past, not kept: `line` is then empty and `overlong` true.
  bool next(std::string& line, bool& complete, bool& overlong) {
    line.clear();
    overlong = false;
    for (;;) {
      const auto newline = std::find(buffer_.begin() + static_cast<std::ptrdiff_t>(start_), buffer_.end(), '\n');
      if (newline != buffer_.end()) {
        const auto end = static_cast<std::size_t>(newline - buffer_.begin());
        keep(line, overlong, end - start_);
        start_ = end + 1;
        complete = true;
        return true;
      }
      keep(line, overlong, buffer_.size() - start_);
      buffer_.clear();
      start_ = 0;
      buffer_.resize(1 << 16);
      const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
      int code = Z_OK;
      const char* message = gzerror(file_, &code);
      if (code != Z_OK && code != Z_STREAM_END && error_.empty()) error_ = message != nullptr ? message : "read error";
      if (n <= 0) {
        buffer_.clear();
        complete = false;
        return !line.empty() || overlong;
      }
      buffer_.resize(static_cast<std::size_t>(n));
      bytes_ += static_cast<std::uint64_t>(n);
    }
  }

 private:
  // Appends the next `n` bytes of the buffer to `line`, unless that makes it longer than kMaxLineBytes: then the
  // line is dropped and the rest of it skipped (memory stays bounded by the cap, whatever a file holds).
  void keep(std::string& line, bool& overlong, std::size_t n) {
    if (!overlong && line.size() + n > kMaxLineBytes) {
      overlong = true;
      std::string().swap(line);
    }
    if (!overlong) line.append(buffer_, start_, n);
  }

  gzFile file_;
  std::string buffer_;
  std::size_t start_ = 0;
  std::uint64_t bytes_ = 0;
  std::string error_;
};

// OTLP/JSON writes 64-bit integers as strings; a Collector may write numbers.
template <typename Int>
Int integer(value v) {
  if (v.type() != simdjson::ondemand::json_type::string) return static_cast<Int>(v.get<Int>().value());
  const std::string_view text = v.get_string();
  Int out = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (error != std::errc() || end != text.data() + text.size())
    throw std::runtime_error("\"" + std::string(text) + "\" where an integer belongs");
  return out;
}

std::int64_t int_value(value v) { return integer<std::int64_t>(v); }

// A double as the protobuf JSON mapping writes it: a number, or "NaN", "Infinity", "-Infinity" (a string, as lens
// and the Collector write non-finite values). Another string is an error, as any malformed value is.
double double_value(value v) {
  if (v.type() != simdjson::ondemand::json_type::string) return v.get_double();
  const std::string_view text = v.get_string();
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (text == "Infinity") return std::numeric_limits<double>::infinity();
  if (text == "-Infinity") return -std::numeric_limits<double>::infinity();
  throw std::runtime_error("\"" + std::string(text) + "\" where a number belongs");
}
std::uint64_t nanos(value v) { return integer<std::uint64_t>(v); }

// An attribute's value: strings, integers, doubles and booleans are read; with `raw` also its JSON text (for args).
struct AnyValue {
  std::string text;
  std::int64_t integer = 0;
  double number = 0;
  bool is_int = false, is_double = false, is_string = false, boolean = false;
  std::string_view raw;  // the value's JSON, e.g. "abc", 12, true (detail only)
};

AnyValue any_value(object v, bool raw) {
  AnyValue out;
  for (auto field : v) {
    std::string_view kind = field.unescaped_key();
    value inner = field.value();
    if (raw && (kind == "stringValue" || kind == "intValue" || kind == "doubleValue" || kind == "boolValue")) {
      out.raw = inner.raw_json_token();                                      // arrays and maps are left out of args
      if (kind == "intValue" && !out.raw.empty() && out.raw.front() == '"')  // 64-bit integers travel as strings
        out.raw = out.raw.substr(1, out.raw.size() - 2);
    }
    if (kind == "stringValue") {
      out.text = std::string(std::string_view(inner));
      out.is_string = true;
    } else if (kind == "intValue") {
      out.integer = int_value(inner);
      out.is_int = true;
    } else if (kind == "doubleValue") {
      out.number = double_value(inner);
      out.is_double = true;
    } else if (kind == "boolValue") {
      out.boolean = inner.get_bool();
    }
  }
  return out;
}

// An integer attribute, also when it arrives as a string ("3": an SDK fed from os.environ sends them so); a
// string that is not a whole integer is -1 (unknown). Read as 0, such ranks were all merged into rank 0.
std::int64_t integer_of(const AnyValue& v) {
  if (!v.is_string) return v.integer;
  std::int64_t out = -1;
  const auto [end, error] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), out);
  return error == std::errc() && end == v.text.data() + v.text.size() ? out : -1;
}

template <typename F>
void each_attribute(array attributes, F&& f, bool raw = false) {
  for (auto a : attributes) {
    std::string_view key;
    AnyValue val;
    for (auto field : a.get_object()) {
      std::string_view k = field.unescaped_key();
      if (k == "key")
        key = field.value().get_string();
      else if (k == "value")
        val = any_value(field.value().get_object(), raw);
    }
    f(key, val);
  }
}

class FileParser {
 public:
  FileParser(RunVisitor& visitor, ReadStats& stats, const ReadOptions& options)
      : visitor_(visitor), stats_(stats), detail_(options.detail), links_(options.links), only_run_(options.run_id) {}

  void line(std::string_view text) {
    simdjson::padded_string json(text);
    auto doc = parser_.iterate(json);
    object root = doc.get_object();
    for (auto field : root) {
      std::string_view key = field.unescaped_key();
      if (key == "resourceSpans") {
        for (auto rs : field.value().get_array()) resource_spans(rs.get_object());
      } else if (key == "resourceMetrics") {
        for (auto rm : field.value().get_array()) resource_metrics(rm.get_object());
      } else if (key != "resourceLogs") {
        throw std::runtime_error("not OTLP/JSON: a line with \"" + std::string(key) + "\"");
      }
    }
  }

 private:
  const Origin* origin_of(object resource) {
    Origin o;
    for (auto field : resource) {
      if (std::string_view(field.unescaped_key()) != "attributes") continue;
      each_attribute(
          field.value().get_array(),
          [&](std::string_view k, const AnyValue& v) {
            if (k == "nemo.run.id")
              o.run_id = v.text;
            else if (k == "service.name")
              o.service = v.text;
            else if (k == "dl.rank")
              o.rank = rank_number(integer_of(v), 0, -1);
            else if (k == "dl.world_size")
              o.world_size = rank_number(integer_of(v), 1, 0);
            else if (k == "dl.pipeline_parallel.size")
              o.pipeline_size = rank_number(integer_of(v), 1, 0);
            else if (k == "dl.data_parallel.size")
              o.data_parallel_size = rank_number(integer_of(v), 1, 0);
            else if (k == "dl.tensor_parallel.size")
              o.tensor_size = rank_number(integer_of(v), 1, 1);
            else if (k == "process.pid")
              o.pid = integer_of(v);
            else if (k == "host.name")
              o.host = v.text;
            if (detail_) append_json_member(o.resource_args, k, v.raw);
          },
          detail_);
    }
    if (!o.run_id.empty() && stats_.run_ids.size() < kMaxRunIds) stats_.run_ids.insert(o.run_id);
    auto [it, inserted] = origins_.try_emplace(process_key(o), o);
    if (!inserted && it->second.pipeline_size == 0) it->second = o;
    return &it->second;
  }

  // Of another run than the one asked for: left out (two runs are never mixed into one report).
  bool left_out(const Origin* origin) const { return !only_run_.empty() && origin->run_id != only_run_; }

  void resource_spans(object rs) {
    const Origin* origin = nullptr;
    for (auto field : rs) {
      std::string_view key = field.unescaped_key();
      if (key == "resource") {
        origin = origin_of(field.value().get_object());
      } else if (key == "scopeSpans") {
        if (origin == nullptr) origin = &unknown_;
        const bool skip = left_out(origin);
        for (auto scope : field.value().get_array()) {
          for (auto sf : scope.get_object()) {
            if (std::string_view(sf.unescaped_key()) != "spans") continue;
            for (auto s : sf.value().get_array())
              if (skip)
                ++stats_.spans_of_other_runs;
              else
                span(s.get_object(), origin);
          }
        }
      }
    }
  }

  void span(object s, const Origin* origin) {
    SpanRow& row = row_;
    row.origin = origin;
    row.start_ns = row.end_ns = 0;
    row.iteration = row.num_microbatches = -1;
    row.loss.reset();
    row.truncated = false;
    row.group_change.reset();
    row.span_id = row.parent_span_id = {};
    row.linked_span_ids.clear();
    row.args_json.clear();
    for (auto field : s) {
      std::string_view key = field.unescaped_key();
      if (key == "name") {
        name_ = std::string(std::string_view(field.value().get_string()));
      } else if (key == "startTimeUnixNano") {
        row.start_ns = nanos(field.value());
      } else if (key == "endTimeUnixNano") {
        row.end_ns = nanos(field.value());
      } else if (key == "attributes") {
        each_attribute(
            field.value().get_array(),
            [&](std::string_view k, const AnyValue& v) {
              if (k == "megatron.iteration" && v.is_int) row.iteration = v.integer;
              if (k == "megatron.loss" && v.is_double) row.loss = v.number;
              if (k == "nemo.span.truncated") row.truncated = v.boolean;
              if ((k == "megatron.num_microbatches" || k == "num_microbatches") && v.is_int)
                row.num_microbatches = v.integer;
              if (detail_) append_json_member(row.args_json, k, v.raw);
            },
            detail_);
      } else if (key == "events") {
        for (auto event : field.value().get_array()) group_change(event.get_object(), row);
      } else if ((detail_ || links_) && key == "spanId") {
        row.span_id = field.value().get_string();
      } else if (detail_ && key == "parentSpanId") {
        row.parent_span_id = field.value().get_string();
      } else if ((detail_ || links_) && key == "links") {
        for (auto link : field.value().get_array())
          for (auto lf : link.get_object())
            if (std::string_view(lf.unescaped_key()) == "spanId")
              row.linked_span_ids.push_back(lf.value().get_string());
      }
    }
    row.name = name_;
    ++stats_.spans;
    visitor_.span(row);
  }

  // The event lens ctl's changes leave on the first step span that runs with them.
  static void group_change(object event, SpanRow& row) {
    SpanRow::GroupChange change;
    bool ours = false;
    for (auto field : event) {
      std::string_view key = field.unescaped_key();
      if (key == "name") {
        ours = std::string_view(field.value().get_string()) == "lens.span_groups.changed";
      } else if (key == "attributes") {
        each_attribute(field.value().get_array(), [&](std::string_view k, const AnyValue& v) {
          if (k == "lens.span_groups") change.span_groups = v.text;
          if (k == "lens.span_groups.for") change.iterations = v.integer;
          if (k == "lens.span_groups.restored") change.restored = v.boolean;
        });
      }
    }
    if (ours) row.group_change = std::move(change);
  }

  void resource_metrics(object rm) {
    const Origin* origin = &unknown_;
    for (auto field : rm) {
      std::string_view key = field.unescaped_key();
      if (key == "resource") {
        origin = origin_of(field.value().get_object());
      } else if (key == "scopeMetrics") {
        if (left_out(origin)) continue;
        for (auto scope : field.value().get_array())
          for (auto sf : scope.get_object())
            if (std::string_view(sf.unescaped_key()) == "metrics")
              for (auto m : sf.value().get_array()) metric(m.get_object(), origin);
      }
    }
  }

  void metric(object m, const Origin* origin) {
    std::string name;
    for (auto field : m) {
      std::string_view key = field.unescaped_key();
      if (key == "name") {
        name = std::string(std::string_view(field.value().get_string()));
      } else if (key == "sum" || key == "gauge") {
        for (auto f : field.value().get_object()) {
          if (std::string_view(f.unescaped_key()) != "dataPoints") continue;
          for (auto p : f.value().get_array()) point(p.get_object(), origin, name);
        }
      }
    }
  }

  void point(object p, const Origin* origin, std::string_view name) {
    MetricPoint out;
    out.origin = origin;
    out.name = name;
    std::string reason;
    for (auto field : p) {
      std::string_view key = field.unescaped_key();
      if (key == "asInt")
        out.value = static_cast<double>(int_value(field.value()));
      else if (key == "asDouble")
        out.value = double_value(field.value());
      else if (key == "timeUnixNano")
        out.time_ns = nanos(field.value());
      else if (key == "attributes")
        each_attribute(field.value().get_array(), [&](std::string_view k, const AnyValue& v) {
          if (k == "reason") reason = v.text;
        });
    }
    out.reason = reason;
    ++stats_.points;
    visitor_.metric(out);
  }

  RunVisitor& visitor_;
  ReadStats& stats_;
  const bool detail_;
  const bool links_;
  const std::string only_run_;
  simdjson::ondemand::parser parser_;
  std::string name_;
  SpanRow row_;                            // reused: its vectors keep their capacity
  std::map<std::string, Origin> origins_;  // node-based: the pointers handed out stay valid
  Origin unknown_;
};

}  // namespace

void append_json_member(std::string& members, std::string_view key, std::string_view raw_value) {
  if (raw_value.empty()) return;
  if (!members.empty()) members += ',';
  members += lens::internal::json_string(key);
  members += ':';
  members += raw_value;
}

namespace {

void add_telemetry_files(const fs::path& root, std::vector<std::string>& files) {
  std::error_code error;
  if (fs::is_regular_file(root, error)) {
    files.push_back(root.string());
    return;
  }
  // A subdirectory that cannot be read is passed over, not the end of the listing.
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error) && is_telemetry_file(it->path())) files.push_back(it->path().string());
  }
}

}  // namespace

std::vector<std::string> telemetry_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> found;
  for (const std::string& input : inputs) add_telemetry_files(input, found);
  // One file reached twice (a directory and its parent, a path and a link to it) is read once: by its canonical path.
  std::map<std::string, std::string> by_canonical;
  for (const std::string& file : found) {
    std::error_code error;
    const fs::path canonical = fs::weakly_canonical(file, error);
    by_canonical.emplace(error ? file : canonical.string(), file);
  }
  std::vector<std::string> files;
  files.reserve(by_canonical.size());
  for (const auto& [canonical, file] : by_canonical) files.push_back(file);
  std::sort(files.begin(), files.end());
  return files;
}

std::string inputs_text(const std::vector<std::string>& inputs) {
  std::string text;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    text += (i == 0 ? "" : i + 1 == inputs.size() ? " and " : ", ") + inputs[i];
  return text;
}

ReadStats read_run(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options) {
  const auto& progress = options.progress;
  ReadStats stats;
  FileParser parser(visitor, stats, options);
  std::uint64_t done = 0;
  for (const std::string& path : files) {
    LineReader reader(path);
    if (!reader.ok()) {
      stats.problems.push_back({path, 0, "cannot be opened"});
      continue;
    }
    ++stats.files;
    std::string line;
    bool complete = true, overlong = false;
    std::uint64_t number = 0;
    while (reader.next(line, complete, overlong)) {
      ++number;
      ++stats.lines;
      if (overlong) {
        stats.problems.push_back({path, number,
                                  "a line longer than " + std::to_string(kMaxLineBytes >> 20) +
                                      " MiB: not read (no OTLP batch lens or a Collector writes is)"});
        continue;
      }
      if (line.empty()) continue;
      try {
        parser.line(line);
      } catch (const std::exception& e) {
        std::string what = complete ? e.what() : std::string("a truncated last line (") + e.what() + ")";
        stats.problems.push_back({path, number, what});
      }
      if (progress && (number & 63) == 0) progress(done + reader.bytes());
    }
    if (!reader.error().empty())
      stats.problems.push_back({path, number + 1, "cannot be read past here: " + reader.error()});
    done += reader.bytes();
  }
  stats.bytes = done;
  if (progress) progress(done);
  return stats;
}

}  // namespace lens_tools
