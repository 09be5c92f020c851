#include "run_reader.h"

#include <pthread.h>
#include <simdjson.h>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/dcheck.h"
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

constexpr std::size_t kBlockBytes = 1 << 20;

// Whole lines of one file as they were read, in one buffer followed by simdjson's padding: each line is parsed where
// it lies, never copied (a copy would be one more pass over every byte). A line
// longer than kMaxLineBytes is not kept: `overlong_at` holds where it stood, before the line that starts there.
struct LineBlock {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0;  // without the padding
  std::size_t size = 0;
  std::vector<std::size_t> overlong_at;
  bool last_line_complete = true;  // false when the file's last line, the block's, has no newline

  // Room for `wanted` bytes, keeping what is held: doubles, so that a long line is copied a few times, not once a
  // read.
  void reserve(std::size_t wanted) {
    if (wanted <= capacity) return;
    const std::size_t grown_capacity = std::max(wanted, 2 * capacity);
    auto grown = std::make_unique_for_overwrite<char[]>(grown_capacity + simdjson::SIMDJSON_PADDING);
    if (size > 0) std::memcpy(grown.get(), data.get(), size);
    std::memset(grown.get() + grown_capacity, 0, simdjson::SIMDJSON_PADDING);  // read past a line's end, never used
    data = std::move(grown);
    capacity = grown_capacity;
  }
  // Empty; the memory a rare long line took is given back.
  void clear() {
    size = 0;
    overlong_at.clear();
    last_line_complete = true;
    if (capacity > 4 * kBlockBytes) {
      data.reset();
      capacity = 0;
    }
  }
};

// A plain or gzip file (zlib reads a plain file as it is) as blocks of about kBlockBytes of whole lines. zlib reads a
// plain file, or inflates a gzip one, straight into the block for what is left of a read past twice its own buffer;
// only the start of a line that a block does not end is copied, to begin the next block.
class BlockReader {
 public:
  // With `first_byte` and `end_byte`: those bytes of a plain file (the lines of a part of it: line_starts_for_parts).
  explicit BlockReader(const std::string& path, std::uint64_t first_byte = 0, std::uint64_t end_byte = UINT64_MAX)
      : file_(gzopen(path.c_str(), "rb")), left_(end_byte - first_byte) {
    if (file_ == nullptr) return;
    gzbuffer(file_, kZlibBufferBytes);
    if (first_byte > 0 && (gzdirect(file_) == 0 || gzseek(file_, static_cast<z_off_t>(first_byte), SEEK_SET) < 0)) {
      gzclose(file_);  // only a plain file is read from its middle (a gzip stream is not cut)
      file_ = nullptr;
    }
  }
  ~BlockReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  bool ok() const { return file_ != nullptr; }
  std::uint64_t bytes() const { return bytes_; }
  // Why reading stopped before the end (a truncated or corrupt gzip stream); empty when it reached the end.
  const std::string& error() const { return error_; }

  // The next lines into `out` (its buffer is kept to read into next time); false, with `out` empty, at the end.
  bool next(LineBlock& out) {
    while (!at_end_ && !(held_.size >= kBlockBytes && line_start_ > 0)) read_more();
    std::swap(out, held_);
    held_.clear();
    out.last_line_complete = true;
    if (!at_end_) {  // the start of the line `out` does not end begins the next block
      const std::size_t tail = out.size - line_start_;
      held_.reserve(std::max(kBlockBytes, tail));
      std::memcpy(held_.data.get(), out.data.get() + line_start_, tail);
      held_.size = tail;
      out.size = line_start_;
      line_start_ = 0;
    } else {
      out.last_line_complete = out.size == 0 || out.data[out.size - 1] == '\n';
      line_start_ = 0;
    }
    return out.size > 0 || !out.overlong_at.empty();
  }

 private:
  void read_more() {
    // Up to a block's bytes; past them, a megabyte more at a time while one line fills the block.
    const std::size_t wanted =
        std::min<std::uint64_t>(held_.size < kBlockBytes ? kBlockBytes - held_.size : kReadBytes, left_);
    if (wanted == 0) {  // the end of the part
      at_end_ = true;
      return;
    }
    held_.reserve(held_.size + wanted);
    char* fresh = held_.data.get() + held_.size;
    const int n = gzread(file_, fresh, static_cast<unsigned>(wanted));
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK && code != Z_STREAM_END && error_.empty()) error_ = message != nullptr ? message : "read error";
    if (n <= 0) {
      at_end_ = true;
      return;
    }
    bytes_ += static_cast<std::uint64_t>(n);
    left_ -= static_cast<std::uint64_t>(n);
    auto fresh_bytes = static_cast<std::size_t>(n);
    if (!skipping_ && held_.size - line_start_ + fresh_bytes > kMaxLineBytes && line_is_overlong(fresh, fresh_bytes)) {
      held_.overlong_at.push_back(line_start_);
      skipping_ = true;
    }
    if (skipping_) {  // the overlong line is dropped, and the rest of it skipped: memory stays bounded
      const void* newline = std::memchr(fresh, '\n', fresh_bytes);
      held_.size = line_start_;
      if (newline == nullptr) return;
      skipping_ = false;
      const std::size_t past = static_cast<std::size_t>(static_cast<const char*>(newline) - fresh) + 1;
      std::memmove(held_.data.get() + line_start_, fresh + past, fresh_bytes - past);
      fresh = held_.data.get() + line_start_;
      fresh_bytes -= past;
    }
    held_.size += fresh_bytes;
    if (const void* last = memrchr(fresh, '\n', fresh_bytes); last != nullptr)
      line_start_ = static_cast<std::size_t>(static_cast<const char*>(last) - held_.data.get()) + 1;
  }

  // Whether the line being read, with the `n` bytes just read at `fresh`, is longer than kMaxLineBytes.
  bool line_is_overlong(const char* fresh, std::size_t n) const {
    const void* newline = std::memchr(fresh, '\n', n);
    const std::size_t end =
        held_.size + (newline != nullptr ? static_cast<std::size_t>(static_cast<const char*>(newline) - fresh) : n);
    return end - line_start_ > kMaxLineBytes;
  }

  static constexpr unsigned kZlibBufferBytes = 1 << 16;
  static constexpr std::size_t kReadBytes = 1 << 20;

  gzFile file_;
  std::uint64_t left_;          // bytes still to read (of a part of the file: its end)
  LineBlock held_;              // read, past the lines handed out: the start of a line, and what follows
  std::size_t line_start_ = 0;  // in held_: where the line that no newline has ended yet begins
  bool skipping_ = false;       // inside an overlong line: what is read is dropped up to its newline
  bool at_end_ = false;
  std::uint64_t bytes_ = 0;
  std::string error_;
};

// OTLP/JSON writes 64-bit integers as strings; a Collector may write numbers.
template <typename Int>
Int integer(value v) {
  if (v.type() != simdjson::ondemand::json_type::string) return static_cast<Int>(v.get<Int>().value());
  // Read in place, not unescaped first: two timestamps a span, on every span of a run.
  Int out = 0;
  simdjson::error_code error;
  if constexpr (std::is_signed_v<Int>) {
    std::int64_t n = 0;
    error = v.get_int64_in_string().get(n);
    out = static_cast<Int>(n);
  } else {
    std::uint64_t n = 0;
    error = v.get_uint64_in_string().get(n);
    out = static_cast<Int>(n);
  }
  if (error) throw std::runtime_error(std::string(v.raw_json_token()) + " where an integer belongs");
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

// A field's key as written, compared without unescaping it (as simdjson's own find_field does): OTLP/JSON's keys
// are plain names, and unescaping every key of every span was a tenth of a report's time.
using Key = simdjson::ondemand::raw_json_string;

AnyValue any_value(object v, bool raw) {
  AnyValue out;
  for (auto field : v) {
    const Key kind = field.key();
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
      const Key k = field.key();
      if (k == "key")
        key = field.value().get_string();
      else if (k == "value")
        val = any_value(field.value().get_object(), raw);
    }
    f(key, val);
  }
}

// The processes of a read, one Origin each: the pointers handed out stay valid while the table lives (node-based).
class OriginTable {
 public:
  const Origin* intern(const Origin& o) {
    auto [it, inserted] = origins_.try_emplace(process_key(o), o);
    if (!inserted && it->second.pipeline_size == 0) it->second = o;  // a later resource that says more wins
    return &it->second;
  }

 private:
  std::map<std::string, Origin> origins_;
};

// simdjson 3.0.1's On Demand parser takes its string buffer from `new (std::nothrow)` and does not check it: out of
// memory (a `ulimit -v`), the next string it unescapes is written through a null pointer. The buffer is private; an
// explicit instantiation may name a private member ([temp.spec.general]), and this one hands it to the check in
// FileParser::line. It fails to compile, not to check, should simdjson rename it.
struct StringBufferOfParser {
  using Member = std::unique_ptr<std::uint8_t[]> simdjson::ondemand::parser::*;
  friend Member string_buffer_member(StringBufferOfParser);
};
template <StringBufferOfParser::Member member>
struct ExposeStringBuffer {
  friend StringBufferOfParser::Member string_buffer_member(StringBufferOfParser) { return member; }
};
template struct ExposeStringBuffer<&simdjson::ondemand::parser::string_buf>;

bool has_string_buffer(const simdjson::ondemand::parser& parser) {
  return parser.*string_buffer_member(StringBufferOfParser{}) != nullptr;
}

class FileParser {
 public:
  FileParser(RunVisitor& visitor, ReadStats& stats, const ReadOptions& options)
      : visitor_(visitor), stats_(&stats), detail_(options.detail), links_(options.links), only_run_(options.run_id) {}
  // Counts into `stats` from now on (a worker's parser counts each block of lines apart).
  void count_into(ReadStats& stats) { stats_ = &stats; }

  // Parses a line where it lies: what follows it in its block (the next lines, then the padding) is simdjson's.
  // Every document of the line is read: a Collector killed and restarted may leave two on one line ("...}{...").
  void line(simdjson::padded_string_view json) {
    const char* const begin = json.data();
    const char* const end = begin + json.size();
    for (const char* at = begin; at != nullptr;) {
      auto doc = parser_.iterate(simdjson::padded_string_view(at, static_cast<std::size_t>(end - at),
                                                              json.capacity() - static_cast<std::size_t>(at - begin)));
      if (doc.error() == simdjson::SUCCESS && !has_string_buffer(parser_))
        throw simdjson::simdjson_error(simdjson::MEMALLOC);
      document(doc.get_object());
      auto next = doc.current_location();  // OUT_OF_BOUNDS at the line's end
      at = next.error() == simdjson::SUCCESS && next.value() > at && next.value() < end ? next.value() : nullptr;
    }
  }

 private:
  void document(object root) {
    for (auto field : root) {
      std::string_view key = field.unescaped_key();  // once a line: said in a problem when unknown
      if (key == "resourceSpans") {
        for (auto rs : field.value().get_array()) resource_spans(rs.get_object());
      } else if (key == "resourceMetrics") {
        for (auto rm : field.value().get_array()) resource_metrics(rm.get_object());
      } else if (key != "resourceLogs") {
        throw std::runtime_error("not OTLP/JSON: a line with \"" + std::string(key) + "\"");
      }
    }
  }

  const Origin* origin_of(object resource) {
    Origin o;
    for (auto field : resource) {
      if (Key(field.key()) != "attributes") continue;
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
    if (!o.run_id.empty() && stats_->run_ids.size() < kMaxRunIds) stats_->run_ids.insert(o.run_id);
    return origins_.intern(o);
  }

  // Of another run than the one asked for: left out (two runs are never mixed into one report).
  bool left_out(const Origin* origin) const { return !only_run_.empty() && origin->run_id != only_run_; }

  void resource_spans(object rs) {
    const Origin* origin = nullptr;
    for (auto field : rs) {
      const Key key = field.key();
      if (key == "resource") {
        origin = origin_of(field.value().get_object());
      } else if (key == "scopeSpans") {
        if (origin == nullptr) origin = &unknown_;
        const bool skip = left_out(origin);
        for (auto scope : field.value().get_array()) {
          for (auto sf : scope.get_object()) {
            if (Key(sf.key()) != "spans") continue;
            for (auto s : sf.value().get_array())
              if (skip)
                ++stats_->spans_of_other_runs;
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
      const Key key = field.key();
      if (key == "name") {
        name_.assign(std::string_view(field.value().get_string()));
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
            if (Key(lf.key()) == "spanId") row.linked_span_ids.push_back(lf.value().get_string());
      }
    }
    row.name = name_;
    ++stats_->spans;
    visitor_.span(row);
  }

  // The event lens ctl's changes leave on the first step span that runs with them.
  static void group_change(object event, SpanRow& row) {
    SpanRow::GroupChange change;
    bool ours = false;
    for (auto field : event) {
      const Key key = field.key();
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
      const Key key = field.key();
      if (key == "resource") {
        origin = origin_of(field.value().get_object());
      } else if (key == "scopeMetrics") {
        if (left_out(origin)) continue;
        for (auto scope : field.value().get_array())
          for (auto sf : scope.get_object())
            if (Key(sf.key()) == "metrics")
              for (auto m : sf.value().get_array()) metric(m.get_object(), origin);
      }
    }
  }

  void metric(object m, const Origin* origin) {
    std::string name;
    for (auto field : m) {
      const Key key = field.key();
      if (key == "name") {
        name = std::string(std::string_view(field.value().get_string()));
      } else if (key == "sum" || key == "gauge") {
        for (auto f : field.value().get_object()) {
          if (Key(f.key()) != "dataPoints") continue;
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
      const Key key = field.key();
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
    ++stats_->points;
    visitor_.metric(out);
  }

  RunVisitor& visitor_;
  ReadStats* stats_;
  const bool detail_;
  const bool links_;
  const std::string only_run_;
  simdjson::ondemand::parser parser_;
  std::string name_;
  SpanRow row_;  // reused: its vectors keep their capacity
  OriginTable origins_;
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

namespace {

// Parses the lines of `block` (or says why one is not read) into `stats`, numbering them from `first_line`; returns
// how many lines the block held.
std::uint64_t parse_block(FileParser& parser, ReadStats& stats, const std::string& path, const LineBlock& block,
                          std::uint64_t first_line) {
  std::uint64_t number = first_line;
  std::size_t overlong = 0;
  const auto overlong_lines_at = [&](std::size_t at) {  // in their place, before the line that starts there
    for (; overlong < block.overlong_at.size() && block.overlong_at[overlong] == at; ++overlong) {
      ++stats.lines;
      stats.problems.push_back({path, number++,
                                "a line longer than " + std::to_string(kMaxLineBytes >> 20) +
                                    " MiB: not read (no OTLP batch lens or a Collector writes is)"});
    }
  };
  const char* const data = block.data.get();
  for (std::size_t start = 0; start < block.size;) {
    overlong_lines_at(start);
    const void* newline = std::memchr(data + start, '\n', block.size - start);
    const std::size_t end =
        newline != nullptr ? static_cast<std::size_t>(static_cast<const char*>(newline) - data) : block.size;
    ++stats.lines;
    const std::uint64_t line = number++;
    if (end > start) {
      try {
        parser.line(simdjson::padded_string_view(data + start, end - start,
                                                 block.capacity + simdjson::SIMDJSON_PADDING - start));
      } catch (const std::exception& e) {
        const bool complete = newline != nullptr || block.last_line_complete;
        stats.problems.push_back(
            {path, line, complete ? e.what() : std::string("a truncated last line (") + e.what() + ")"});
      }
    }
    start = end + 1;
  }
  overlong_lines_at(block.size);
  return number - first_line;
}

// The lines parse_block numbers in `block`, counted without parsing: a block whose parsing failed (out of memory)
// still takes its place in the file's numbering, so that the problems of its later blocks are said at their lines.
// Not inlined: a cold path, and inlined into the workers' loop it sets off GCC 12's maybe-uninitialized warning about
// an unrelated std::optional.
[[gnu::noinline]] std::uint64_t lines_in(const LineBlock& block) {
  std::uint64_t lines = block.overlong_at.size();
  const char* const data = block.data.get();
  for (std::size_t start = 0; start < block.size; ++lines) {
    const void* newline = std::memchr(data + start, '\n', block.size - start);
    if (newline == nullptr) return lines + 1;
    start = static_cast<std::size_t>(static_cast<const char*>(newline) - data) + 1;
  }
  return lines;
}

void say_not_opened(ReadStats& stats, const std::string& path) {
  stats.problems.push_back({path, 0, "cannot be opened"});
}

// What kept a file from being read to its end, after its `lines` lines.
void say_not_read_past(ReadStats& stats, const std::string& path, std::uint64_t lines, const std::string& error) {
  if (!error.empty()) stats.problems.push_back({path, lines + 1, "cannot be read past here: " + error});
}

}  // namespace

void merge_read_stats(ReadStats& into, ReadStats&& part) {
  into.files += part.files;
  into.lines += part.lines;
  into.bytes += part.bytes;
  into.spans += part.spans;
  into.points += part.points;
  into.spans_of_other_runs += part.spans_of_other_runs;
  for (auto& problem : part.problems) into.problems.push_back(std::move(problem));
  for (const auto& run : part.run_ids)
    if (into.run_ids.size() < kMaxRunIds) into.run_ids.insert(run);
}

namespace {

// What the visitor threw, carried past parse_block's catch (a line's problem is the parser's, not the visitor's).
struct VisitorFailed {
  std::exception_ptr error;
};

// Hands rows on to the serial read's visitor.
class VisitorOnTheParsersThread final : public RunVisitor {
 public:
  explicit VisitorOnTheParsersThread(RunVisitor& to) : to_(to) {}
  void span(const SpanRow& row) override {
    try {
      to_.span(row);
    } catch (...) {
      throw VisitorFailed{std::current_exception()};
    }
  }
  void metric(const MetricPoint& point) override {
    try {
      to_.metric(point);
    } catch (...) {
      throw VisitorFailed{std::current_exception()};
    }
  }

 private:
  RunVisitor& to_;
};

ReadStats read_serially(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options) {
  const auto& progress = options.progress;
  ReadStats stats;
  VisitorOnTheParsersThread passing(visitor);
  FileParser parser(passing, stats, options);
  std::uint64_t done = 0;
  LineBlock block;
  try {
    for (const std::string& path : files) {
      BlockReader reader(path, options.first_byte, options.end_byte);
      if (!reader.ok()) {
        say_not_opened(stats, path);
        continue;
      }
      ++stats.files;
      std::uint64_t lines = 0;
      while (reader.next(block)) {
        lines += parse_block(parser, stats, path, block, lines + 1);
        if (progress) progress(done + reader.bytes());
      }
      say_not_read_past(stats, path, lines, reader.error());
      done += reader.bytes();
    }
  } catch (const VisitorFailed& failed) {
    std::rethrow_exception(failed.error);
  }
  stats.bytes = done;
  if (progress) progress(done);
  return stats;
}

// ---- reading in parallel -----------------------------------------------------------------------------------

// What a parser found in a block of lines, owned (its rows' text outlives the parser's buffers), to be handed to
// the visitor on the calling thread in the files' order. A span is plain numbers and offsets into `text`, so a
// block's rows are a few flat vectors that keep their capacity when the block is reused.
struct ParsedRows {
  struct Text {
    std::uint32_t offset = 0, length = 0;
  };
  struct Span {
    std::uint64_t start_ns = 0, end_ns = 0;
    std::int64_t iteration = -1, num_microbatches = -1;
    double loss = 0;
    bool has_loss = false, truncated = false;
    std::int32_t group_change = -1;  // into group_changes (a rare event on a step span)
    std::uint32_t origin = 0;
    Text name, span_id, parent_span_id, args_json;
    std::uint32_t links_begin = 0, links_end = 0;
  };
  struct Point {
    MetricPoint point;
    std::uint32_t origin = 0;
    Text name, reason;
  };
  std::vector<Origin> origins;  // as the worker's parser read them
  std::vector<Span> spans;
  std::vector<Point> points;
  std::vector<bool> order;  // true: the next span, false: the next point
  std::vector<Text> links;
  std::vector<SpanRow::GroupChange> group_changes;
  std::string text;

  void clear() {
    origins.clear();
    spans.clear();
    points.clear();
    order.clear();
    links.clear();
    group_changes.clear();
    text.clear();
  }
  Text keep(std::string_view v) {
    Text t{static_cast<std::uint32_t>(text.size()), static_cast<std::uint32_t>(v.size())};
    text.append(v);
    return t;
  }
  std::string_view view(Text t) const { return std::string_view(text).substr(t.offset, t.length); }
};

// A visitor on a worker: copies what its parser hands it into the block's rows.
class RowRecorder final : public RunVisitor {
 public:
  void start(ParsedRows& rows) {
    rows_ = &rows;
    last_origin_ = nullptr;
  }
  void span(const SpanRow& row) override {
    ParsedRows::Span& s = rows_->spans.emplace_back();
    s.start_ns = row.start_ns;
    s.end_ns = row.end_ns;
    s.iteration = row.iteration;
    s.num_microbatches = row.num_microbatches;
    s.has_loss = row.loss.has_value();
    s.loss = row.loss.value_or(0);
    s.truncated = row.truncated;
    if (row.group_change) {
      s.group_change = static_cast<std::int32_t>(rows_->group_changes.size());
      rows_->group_changes.push_back(*row.group_change);
    }
    s.origin = origin_index(row.origin);
    s.name = rows_->keep(row.name);
    s.span_id = rows_->keep(row.span_id);
    s.parent_span_id = rows_->keep(row.parent_span_id);
    s.args_json = rows_->keep(row.args_json);
    s.links_begin = static_cast<std::uint32_t>(rows_->links.size());
    for (std::string_view link : row.linked_span_ids) rows_->links.push_back(rows_->keep(link));
    s.links_end = static_cast<std::uint32_t>(rows_->links.size());
    rows_->order.push_back(true);
  }
  void metric(const MetricPoint& point) override {
    ParsedRows::Point& p = rows_->points.emplace_back();
    p.point = point;
    p.point.name = p.point.reason = {};
    p.origin = origin_index(point.origin);
    p.name = rows_->keep(point.name);
    p.reason = rows_->keep(point.reason);
    rows_->order.push_back(false);
  }

 private:
  std::uint32_t origin_index(const Origin* origin) {
    if (origin != last_origin_) {  // a batch of lens's is one process: one copy a line at most
      rows_->origins.push_back(*origin);
      last_origin_ = origin;
    }
    return static_cast<std::uint32_t>(rows_->origins.size() - 1);
  }
  ParsedRows* rows_ = nullptr;
  const Origin* last_origin_ = nullptr;
};

constexpr std::size_t kBlocksPerWorker = 4;

// A run of lines of one file (about kBlockBytes), parsed by one worker. Blocks are numbered in the order they
// were read; the visitor takes them in that order. A file's last block holds no lines: it says whether the file
// could be opened and read to its end.
struct Block {
  std::size_t file = 0;
  LineBlock lines;
  std::uint64_t line_count = 0;  // the worker's: its problems are numbered from 1, and the file's lines before
                                 // them added on the calling thread (ParallelRead::number_problems)
  std::string read_error;        // on a file's last block: what kept the file from being read to its end
  ReadStats stats;               // the worker's counts, and the reader's: a file opened or not
  std::uint64_t done_bytes = 0;  // of the whole read, once this block is visited
  ParsedRows rows;
  bool parsed = false;
};

// One thread reads the files' lines in order into blocks; `workers` threads parse blocks, each its own; the calling
// thread hands the rows to the visitor block by block in the order they were read, so the visitor sees exactly
// what a serial read would show it, whatever the timing. Memory is bounded: at most kBlocksPerWorker blocks per
// worker are read ahead of the one being visited.
class ParallelRead {
 public:
  ParallelRead(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options,
               std::size_t workers)
      : files_(files), visitor_(visitor), options_(options), workers_(workers) {}

  ReadStats run() {
    if (!start_threads()) return read_serially(files_, visitor_, options_);
    ReadStats stats;
    std::uint64_t done = 0;
    try {
      while (std::unique_ptr<Block> block = next_parsed()) {
        visit(*block);
        number_problems(*block);
        done = block->done_bytes;
        merge_read_stats(stats, std::move(block->stats));
        give_back(std::move(block));
        if (options_.progress) options_.progress(done);
      }
    } catch (...) {  // the visitor's: no thread may outlive the read
      stop_and_join();
      throw;
    }
    stop_and_join();
    if (error_) std::rethrow_exception(error_);
    stats.bytes = done;
    return stats;
  }

 private:
  // Thrown on the reader thread when the read was stopped: it unwinds the file being read.
  struct Stopped {};

  // The workers the process lets start (workers_ becomes their number: it bounds the blocks read ahead), then the
  // reader; false, with none left running, without the reader and one worker.
  bool start_threads() {
    threads_.reserve(workers_ + 1);
    const std::size_t wanted = workers_;
    workers_ = 0;
    while (workers_ < wanted && try_start_thread(threads_, [this] { parse(); })) ++workers_;
    if (workers_ > 0 && try_start_thread(threads_, [this] { read(); })) return true;
    stop_and_join();
    return false;
  }

  void stop_and_join() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    read_wait_.notify_all();
    parse_wait_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // A visited block, kept for the reader to fill again: its rows' vectors keep their capacity (no allocation and
  // page faults a block once the read is under way). There are never more than the blocks in flight.
  void give_back(std::unique_ptr<Block> block) {
    std::lock_guard lock(mutex_);
    spare_.push_back(std::move(block));
  }

  std::unique_ptr<Block> empty_block(std::size_t file) {
    std::unique_ptr<Block> block;
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        block = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (block == nullptr) block = std::make_unique<Block>();
    block->file = file;
    block->lines.clear();  // its buffer is kept to be read into, unless a rare long line made it large
    block->line_count = 0;
    block->read_error.clear();
    block->stats = {};
    block->done_bytes = 0;
    block->rows.clear();
    block->parsed = false;
    return block;
  }

  // The reader thread: what it could not read (out of memory) ends the read, and reaches the caller.
  void read() {
    try {
      read_files();
    } catch (const Stopped&) {
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    read_all_ = true;
    parse_wait_.notify_all();
    visit_wait_.notify_all();
  }

  void read_files() {
    std::uint64_t done = 0;
    for (std::size_t f = 0; f < files_.size(); ++f) {
      BlockReader reader(files_[f]);
      std::unique_ptr<Block> block = empty_block(f);
      if (!reader.ok()) {
        say_not_opened(block->stats, files_[f]);
      } else {
        ++block->stats.files;
        while (reader.next(block->lines)) {
          block->done_bytes = done + reader.bytes();
          hand_out(std::move(block));
          block = empty_block(f);
        }
        block->read_error = reader.error();
      }
      done += reader.bytes();
      block->done_bytes = done;
      hand_out(std::move(block));
    }
  }

  void hand_out(std::unique_ptr<Block> block) {
    std::unique_lock lock(mutex_);
    read_wait_.wait(lock, [&] { return blocks_.size() < kBlocksPerWorker * workers_ || stopped_; });
    if (stopped_) throw Stopped{};
    blocks_.push_back(std::move(block));
    to_parse_.push_back(blocks_.back().get());
    parse_wait_.notify_one();
  }

  // A worker thread. What it cannot do outside a block's lines (out of memory) stops the read and reaches the caller.
  void parse() {
    try {
      parse_blocks();
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        stopped_ = true;
      }
      read_wait_.notify_all();
      parse_wait_.notify_all();
      visit_wait_.notify_all();
    }
  }

  void parse_blocks() {
    RowRecorder recorder;
    ReadStats unused;
    FileParser parser(recorder, unused, options_);
    for (;;) {
      Block* block;
      {
        std::unique_lock lock(mutex_);
        parse_wait_.wait(lock, [&] { return !to_parse_.empty() || read_all_ || stopped_; });
        if (to_parse_.empty() || stopped_) return;
        block = to_parse_.front();
        to_parse_.pop_front();
      }
      recorder.start(block->rows);
      parser.count_into(block->stats);
      const std::string& path = files_[block->file];
      try {
        block->line_count = parse_block(parser, block->stats, path, block->lines, 1);
      } catch (const std::exception& e) {  // out of memory: this block's problem, the rest is still read
        block->line_count = lines_in(block->lines);
        block->stats.problems.push_back({path, 0, std::string("could not be read: ") + e.what()});
      }
      LENS_DCHECK(block->line_count == lines_in(block->lines));
      say_not_read_past(block->stats, path, block->line_count, block->read_error);
      {
        std::lock_guard lock(mutex_);
        block->parsed = true;
      }
      visit_wait_.notify_all();
    }
  }

  // The calling thread: the oldest block, once parsed; null when every block was visited.
  std::unique_ptr<Block> next_parsed() {
    std::unique_lock lock(mutex_);
    visit_wait_.wait(lock, [&] {
      return (!blocks_.empty() && blocks_.front()->parsed) || (blocks_.empty() && read_all_) || stopped_;
    });
    if (blocks_.empty() || stopped_) return nullptr;
    std::unique_ptr<Block> block = std::move(blocks_.front());
    blocks_.pop_front();
    read_wait_.notify_one();
    return block;
  }

  // A worker numbers a block's lines from 1: the lines of its file in the blocks before it are added here, in order.
  void number_problems(Block& block) {
    if (block.file != numbered_file_) {
      numbered_file_ = block.file;
      lines_before_ = 0;
    }
    for (ReadProblem& p : block.stats.problems)
      if (p.line > 0) p.line += lines_before_;  // 0: no line (a file that cannot be opened)
    lines_before_ += block.line_count;
  }

  // Hands a block's rows to the visitor, each with the read's own Origin of its process.
  void visit(const Block& block) {
    const ParsedRows& b = block.rows;
    std::vector<const Origin*> origins;
    origins.reserve(b.origins.size());
    for (const Origin& o : b.origins) origins.push_back(origins_.intern(o));
    std::size_t span = 0, point = 0;
    for (bool is_span : b.order) {
      if (is_span) {
        const ParsedRows::Span& s = b.spans[span++];
        row_.origin = origins[s.origin];
        row_.name = b.view(s.name);
        row_.start_ns = s.start_ns;
        row_.end_ns = s.end_ns;
        row_.iteration = s.iteration;
        row_.num_microbatches = s.num_microbatches;
        row_.loss = s.has_loss ? std::optional<double>(s.loss) : std::nullopt;
        row_.truncated = s.truncated;
        row_.group_change.reset();
        if (s.group_change >= 0) row_.group_change = b.group_changes[static_cast<std::size_t>(s.group_change)];
        row_.args_json.assign(b.view(s.args_json));
        row_.span_id = b.view(s.span_id);
        row_.parent_span_id = b.view(s.parent_span_id);
        row_.linked_span_ids.clear();
        for (std::uint32_t i = s.links_begin; i < s.links_end; ++i) row_.linked_span_ids.push_back(b.view(b.links[i]));
        visitor_.span(row_);
      } else {
        const ParsedRows::Point& p = b.points[point++];
        MetricPoint out = p.point;
        out.origin = origins[p.origin];
        out.name = b.view(p.name);
        out.reason = b.view(p.reason);
        visitor_.metric(out);
      }
    }
  }

  const std::vector<std::string>& files_;
  RunVisitor& visitor_;
  const ReadOptions& options_;
  std::size_t workers_;  // set before the reader starts
  OriginTable origins_;  // the calling thread's
  SpanRow row_;
  std::size_t numbered_file_ = std::numeric_limits<std::size_t>::max();  // number_problems's, on the calling thread
  std::uint64_t lines_before_ = 0;

  std::mutex mutex_;  // guards everything below, and each block's `parsed`
  std::condition_variable read_wait_, parse_wait_, visit_wait_;
  std::deque<std::unique_ptr<Block>> blocks_;  // read, in order, until visited
  std::deque<Block*> to_parse_;
  bool read_all_ = false;
  bool stopped_ = false;                       // the calling thread is done: every other thread ends
  std::exception_ptr error_;                   // what ended the reader or a worker early
  std::vector<std::thread> threads_;           // the reader's and the workers', joined before run() returns
  std::vector<std::unique_ptr<Block>> spare_;  // visited, to be filled again
};

// A limit on the address space (`ulimit -v`, as some login nodes set) counts what each thread reserves: its whole
// stack (8 MiB by default), the heap glibc's malloc gives it (64 MiB on 64-bit) and the blocks it holds (each about
// 2 MiB of text read ahead and 1 MiB of rows). The reading
// threads are as many as take half of it: without the bound, the threads' reservations alone filled a 160 MiB limit.
std::size_t threads_the_address_space_holds() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMaxReadingThreads;
  std::size_t stack = 0;
  pthread_attr_t attributes;
  if (pthread_getattr_default_np(&attributes) == 0) {
    pthread_attr_getstacksize(&attributes, &stack);
    pthread_attr_destroy(&attributes);
  }
  if (stack == 0) stack = std::size_t{8} << 20;
  constexpr std::size_t kMallocArenaBytes = std::size_t{64} << 20;
  const std::size_t per_thread = stack + kMallocArenaBytes + 3 * kBlocksPerWorker * kBlockBytes;
  return std::max<std::size_t>(limit.rlim_cur / 2 / per_thread, 1);
}

}  // namespace

std::size_t reading_threads(const ReadOptions& options) {
  const std::size_t threads = options.threads > 0 ? static_cast<std::size_t>(options.threads)
                                                  : std::max<std::size_t>(std::thread::hardware_concurrency(), 1);
  return std::min({threads, kMaxReadingThreads, threads_the_address_space_holds()});
}

namespace {

// Where the line after the first newline at or after `from` begins; none when the file ends first.
std::optional<std::uint64_t> line_start_after(std::FILE* file, std::uint64_t from, std::vector<char>& buffer) {
  if (std::fseek(file, static_cast<long>(from), SEEK_SET) != 0) return std::nullopt;
  for (std::uint64_t at = from;;) {
    const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), file);
    if (n == 0) return std::nullopt;
    if (const void* newline = std::memchr(buffer.data(), '\n', n))
      return at + static_cast<std::uint64_t>(static_cast<const char*>(newline) - buffer.data()) + 1;
    at += n;
  }
}

}  // namespace

std::vector<std::uint64_t> line_starts_for_parts(const std::string& path, std::size_t parts) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return {};
  parts = static_cast<std::size_t>(std::min<std::uintmax_t>(parts, size / kMinPartBytes));
  if (parts < 2) return {};
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  unsigned char magic[2] = {};
  if (file == nullptr || std::fread(magic, 1, 2, file.get()) != 2 || (magic[0] == 0x1f && magic[1] == 0x8b))
    return {};  // gzip: read whole, by one thread
  std::vector<std::uint64_t> cuts{0};
  std::vector<char> buffer(1 << 16);
  for (std::size_t k = 1; k < parts; ++k) {
    // The first line that begins at or after the k-th share of the bytes (and after the part before).
    const std::uint64_t share = std::max<std::uint64_t>(size * k / parts, cuts.back() + 1);
    const std::optional<std::uint64_t> start = line_start_after(file.get(), share - 1, buffer);
    if (!start || *start >= size) break;
    cuts.push_back(*start);
  }
  if (cuts.size() < 2) return {};
  cuts.push_back(size);
  return cuts;
}

ReadStats read_run(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options) {
  const std::size_t threads = reading_threads(options);
  if (threads <= 1 || files.empty()) return read_serially(files, visitor, options);
  return ParallelRead(files, visitor, options, threads).run();
}

}  // namespace lens_tools
