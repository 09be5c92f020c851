#include "run_parsing.h"

#include <simdjson.h>

#include <charconv>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/json_escape.h"

namespace lens_tools {

namespace {

using simdjson::ondemand::array;
using simdjson::ondemand::object;
using simdjson::ondemand::value;

// A rank or a parallel size from a file: within [lowest, kMaxRanks], else `unknown` (a product of two sizes that
// overflowed an int made the tools divide by zero).
int rank_number(std::int64_t value, std::int64_t lowest, int unknown) {
  return value >= lowest && value <= kMaxRanks ? static_cast<int>(value) : unknown;
}

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

}  // namespace

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
    row.truncated = row.backward_pass = false;
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
              if (k == "megatron.tp.pass") row.backward_pass = v.is_string && v.text == "backward";
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
        for (auto link : field.value().get_array()) linked_span(link.get_object(), row);
      }
    }
    row.name = name_;
    ++stats_->spans;
    visitor_.span(row);
  }

  // A link's span id, unless the link says `lens.link.peer` (the other end of a transfer, which says nothing of
  // which started first: CONTRACT §6): only the links that do (a receive's to its send) bound clocks and draw arrows.
  static void linked_span(object link, SpanRow& row) {
    std::string_view id;
    bool peer = false;
    for (auto field : link) {
      const Key key = field.key();
      if (key == "spanId") {
        id = field.value().get_string();
      } else if (key == "attributes") {
        for (auto attribute : field.value().get_array())
          for (auto af : attribute.get_object()) {
            if (Key(af.key()) != "key") continue;
            const std::string_view name = af.value().get_string();
            if (name == "lens.link.peer") peer = true;
          }
      }
    }
    if (!peer && !id.empty()) row.linked_span_ids.push_back(id);
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

LineParser::LineParser(RunVisitor& visitor, ReadStats& stats, const ReadOptions& options)
    : parser_(std::make_unique<FileParser>(visitor, stats, options)) {}
LineParser::~LineParser() = default;
void LineParser::count_into(ReadStats& stats) { parser_->count_into(stats); }

void append_json_member(std::string& members, std::string_view key, std::string_view raw_value) {
  if (raw_value.empty()) return;
  if (!members.empty()) members += ',';
  members += lens::internal::json_string(key);
  members += ':';
  members += raw_value;
}

std::uint64_t parse_block(LineParser& parser, ReadStats& stats, const std::string& path, const LineBlock& block,
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
        parser.parser_->line(simdjson::padded_string_view(data + start, end - start,
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

std::uint64_t lines_in(const LineBlock& block) {
  std::uint64_t lines = block.overlong_at.size();
  const char* const data = block.data.get();
  for (std::size_t start = 0; start < block.size; ++lines) {
    const void* newline = std::memchr(data + start, '\n', block.size - start);
    if (newline == nullptr) return lines + 1;
    start = static_cast<std::size_t>(static_cast<const char*>(newline) - data) + 1;
  }
  return lines;
}

}  // namespace lens_tools
