#include "hang/snapshot.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/files.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "common/process_identity.h"
#include "common/text.h"
#include "trace/record.h"

namespace lens::internal {

namespace {

std::atomic<std::int64_t> g_iteration{-1};
std::atomic<std::uint64_t> g_boundary_nanos{0};

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string seconds(std::uint64_t nanos) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(nanos) / 1e9);
  return text;
}

std::string attribute_value(const AttributeView& a) {
  switch (a.type) {
    case ValueType::kBool: return a.as_bool() ? "true" : "false";
    case ValueType::kInt: return std::to_string(a.as_int());
    case ValueType::kDouble: return number(a.as_double());
    case ValueType::kString: return json_string(a.as_string());
    default: break;
  }
  std::string out = "[";
  std::uint32_t cursor = 0;
  for (std::uint32_t i = 0, n = a.array_size(); i < n; ++i) {
    if (i != 0) out += ", ";
    switch (a.type) {
      case ValueType::kBoolArray: out += a.bool_at(i) ? "true" : "false"; break;
      case ValueType::kIntArray: out += std::to_string(a.int_at(i)); break;
      case ValueType::kDoubleArray: out += number(a.double_at(i)); break;
      default: out += json_string(a.next_string(cursor)); break;
    }
  }
  return out + "]";
}

// The kernel's name of one of this process's threads ("" when it is gone).
std::string thread_name(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

std::string span_json(const HangSettings& settings, const SpanView& span, const TimeMap& time, std::uint64_t now_unix) {
  const RecordHeader& h = span.header();
  const std::uint64_t start = start_unix_nanos(h, time);
  std::string out = "{\"name\": " + json_string(span.name());
  out += ", \"group\": " + json_string(h.group < settings.group_names.size() ? settings.group_names[h.group] : "");
  out += ", \"start_unix_nano\": " + std::to_string(start);
  out += ", \"open_seconds\": " + seconds(now_unix > start ? now_unix - start : 0);
  if (h.bits & RecordHeader::kPositionOnly) {  // its group is not exported: no ids
    out += ", \"position_only\": true, \"trace_id\": null, \"span_id\": null";
  } else {
    out +=
        ", \"position_only\": false, \"trace_id\": \"" + hex(h.trace_id.bytes.data(), h.trace_id.bytes.size()) + "\"";
    out += ", \"span_id\": \"" + hex(h.span_id.bytes.data(), h.span_id.bytes.size()) + "\"";
  }
  out += ", \"parent_span_id\": ";
  out += (h.bits & RecordHeader::kHasParent) ? "\"" + hex(h.parent_span_id.bytes.data(), 8) + "\"" : "null";
  out += ", \"attributes\": {";
  bool first = true;
  span.for_each_attribute([&](const AttributeView& a) {
    out += (first ? "" : ", ") + json_string(a.key) + ": " + attribute_value(a);
    first = false;
  });
  return out + "}}";
}

}  // namespace

void note_iteration_boundary(std::int64_t iteration) noexcept {
  g_iteration.store(iteration, std::memory_order_relaxed);
  g_boundary_nanos.store(steady_nanos(), std::memory_order_release);
}

IterationProgress iteration_progress() noexcept {
  IterationProgress p;
  p.boundary_nanos = g_boundary_nanos.load(std::memory_order_acquire);
  p.iteration = g_iteration.load(std::memory_order_relaxed);
  return p;
}

void reset_iteration_progress() noexcept {
  g_boundary_nanos.store(0, std::memory_order_relaxed);
  g_iteration.store(-1, std::memory_order_relaxed);
}

std::string hang_snapshot_json(const HangSettings& settings, const SpanDrain& spans, std::string_view reason) {
  const std::vector<SpanDrain::OpenSpanCopy> open = spans.open_spans();
  const TimeMap time;
  const std::uint64_t now_unix = unix_nanos_now();
  const IterationProgress progress = iteration_progress();
  std::string out =
      "{\"lens_hang_snapshot\": 1, \"rank\": " + std::to_string(settings.rank) +
      ", \"world_size\": " + std::to_string(settings.world_size) + ", \"pid\": " + std::to_string(::getpid()) +
      ", \"host\": " + json_string(this_host()) + ", \"run_id\": " + json_string(settings.run_id) +
      ", \"reason\": " + json_string(reason) + ", \"exporting\": " + (settings.exporting ? "true" : "false") +
      ", \"hang_timeout_seconds\": " + seconds(static_cast<std::uint64_t>(settings.timeout_ms) * 1000000) +
      ", \"written_unix_nano\": " + std::to_string(now_unix);
  const bool started = progress.boundary_nanos != 0;
  out += ", \"last_iteration_completed\": " + (started ? std::to_string(progress.iteration - 1) : "null");
  out += ", \"seconds_since_iteration_boundary\": " +
         (started ? seconds(steady_nanos() - progress.boundary_nanos) : std::string("null"));
  out += ", \"threads\": [";
  for (std::size_t i = 0; i < open.size();) {
    const pid_t tid = open[i].tid;
    out += (i == 0 ? "" : ", ") + std::string("{\"tid\": ") + std::to_string(tid) +
           ", \"name\": " + json_string(thread_name(tid)) + ", \"open_spans\": [";
    for (bool first = true; i < open.size() && open[i].tid == tid; ++i, first = false)
      out += (first ? "" : ", ") + span_json(settings, SpanView(open[i].record.data()), time, now_unix);
    out += "]}";
  }
  return out + "]}\n";
}

bool write_hang_snapshot(const HangSettings& settings, const SpanDrain& spans, std::string_view reason) {
  try {
    const std::string text = hang_snapshot_json(settings, spans, reason);
    // A rank exporting over OTLP, or not at all, has made no run directory yet: made as the file exporter does.
    const std::error_code error = make_private_directories(std::filesystem::path(settings.path).parent_path());
    if (!error && write_file_atomically(settings.path, text, 0600)) {
      log_warning("hang snapshot (%.*s) written to %s", static_cast<int>(reason.size()), reason.data(),
                  settings.path.c_str());
      return true;
    }
    log_warning("cannot write the hang snapshot %s", settings.path.c_str());
  } catch (...) {
    log_warning("no memory for a hang snapshot");
  }
  return false;
}

std::string rank_process_json(const HangSettings& settings) {
  const ProcessIdentity me = process_identity(::getpid()).value_or(ProcessIdentity{});
  const char* signal = settings.signal == SIGUSR1 ? "SIGUSR1" : settings.signal == SIGUSR2 ? "SIGUSR2" : "none";
  return "{\"lens_rank_process\": 1, \"rank\": " + std::to_string(settings.rank) +
         ", \"pid\": " + std::to_string(::getpid()) + ", \"host\": " + json_string(this_host()) +
         ", \"run_id\": " + json_string(settings.run_id) + ", \"boot_id\": " + json_string(me.boot_id) +
         ", \"start_ticks\": " + std::to_string(me.start_ticks) + ", \"comm\": " + json_string(me.comm) +
         ", \"uid\": " + std::to_string(::getuid()) +
         ", \"pid_namespace\": " + std::to_string(this_pid_namespace().value_or(0)) + ", \"hang_signal\": \"" + signal +
         "\"}\n";
}

bool write_rank_process_record(const HangSettings& settings) {
  if (settings.process_path.empty()) return false;
  try {
    const std::error_code error = make_private_directories(std::filesystem::path(settings.process_path).parent_path());
    if (!error && write_file_atomically(settings.process_path, rank_process_json(settings), 0600)) return true;
    log_warning("cannot write %s: `lens hang --signal` will not find this rank", settings.process_path.c_str());
  } catch (...) {
  }
  return false;
}

void remove_rank_process_record(const HangSettings& settings) noexcept {
  if (!settings.process_path.empty()) remove_file_and_empty_directory(settings.process_path);
}

}  // namespace lens::internal
