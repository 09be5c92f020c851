#include "profiler_trace.h"

#include <zlib.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace lens_tools {
namespace {

using json = nlohmann::json;

// Unix microseconds from 2001 on: a `ts` this large is an absolute time, not one from the profiler's start.
constexpr double kEpochMicrosecondsFloor = 1e15;

std::string read_file(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (file == nullptr) throw ProfilerTraceError("cannot read " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<std::size_t>(n));
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw ProfilerTraceError("cannot read " + path + " (a damaged gzip file?)");
  return text;
}

// The events, and the base every `ts` is after (0: the ts are Unix microseconds themselves).
std::pair<const json*, double> events_and_base(const json& document, const std::string& path) {
  if (document.is_array()) return {&document, 0.0};
  if (!document.is_object() || !document.contains("traceEvents") || !document["traceEvents"].is_array())
    throw ProfilerTraceError(path + " is not a trace: no traceEvents list");
  const json& base = document.value("baseTimeNanoseconds", json());
  if (!base.is_null() && !base.is_number()) throw ProfilerTraceError(path + ": baseTimeNanoseconds is not a number");
  return {&document["traceEvents"], base.is_number() ? base.get<double>() : 0.0};
}

bool has_absolute_times(const json& events) {
  for (const json& e : events)
    if (e.is_object() && e.value("ph", "") == "X" && e.value("ts", 0.0) >= kEpochMicrosecondsFloor) return true;
  return false;
}

std::string key_of(const json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

}  // namespace

ProfilerTrace read_profiler_trace(const std::string& path) {
  json document = json::parse(read_file(path), nullptr, false);
  if (document.is_discarded()) throw ProfilerTraceError(path + " is not JSON");
  const auto [events, base_ns] = events_and_base(document, path);
  if (base_ns == 0.0 && !has_absolute_times(*events))
    throw ProfilerTraceError(
        path +
        " has no time base: no baseTimeNanoseconds, and its ts count from the profiler's start (PyTorch without "
        "Kineto writes them so); add \"baseTimeNanoseconds\": prof.profiler.kineto_results.trace_start_us() * 1000 "
        "to the trace's top object (docs/TOOLS.md)");
  ProfilerTrace trace;
  trace.path = path;
  std::map<std::pair<std::string, std::string>, int> tracks;  // (pid, tid) -> track
  std::map<std::pair<std::string, std::string>, std::string> thread_names;
  for (const json& e : *events)
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.contains("args"))
      thread_names[{key_of(e.value("pid", json())), key_of(e.value("tid", json()))}] =
          e["args"].value("name", std::string());
  for (const json& e : *events) {
    if (!e.is_object()) continue;
    const std::string phase = e.value("ph", "");
    const bool instant = phase == "i" || phase == "I";
    if (phase != "X" && !instant) continue;
    const json& ts = e.value("ts", json());
    if (!ts.is_number()) continue;
    const std::pair<std::string, std::string> thread{key_of(e.value("pid", json())), key_of(e.value("tid", json()))};
    auto [where, added] = tracks.try_emplace(thread, static_cast<int>(trace.tracks.size()));
    if (added) {
      auto named = thread_names.find(thread);
      trace.tracks.push_back(named != thread_names.end() && !named->second.empty()
                                 ? named->second + " (" + thread.first + ")"
                                 : thread.first + " / " + thread.second);
    }
    ProfilerEvent out;
    out.name = e.value("name", std::string());
    out.category = e.value("cat", std::string());
    const double start_ns = base_ns + ts.get<double>() * 1000.0;
    if (!(start_ns > 0)) continue;
    out.start_ns = static_cast<std::uint64_t>(std::llround(start_ns));
    const json& duration = e.value("dur", json());
    out.duration_ns = instant || !duration.is_number() || duration.get<double>() < 0
                          ? 0
                          : static_cast<std::uint64_t>(std::llround(duration.get<double>() * 1000.0));
    out.track = where->second;
    out.instant = instant;
    if (e.contains("args") && e["args"].is_object() && !e["args"].empty()) out.args_json = e["args"].dump();
    trace.first_ns = std::min(trace.first_ns, out.start_ns);
    trace.events.push_back(std::move(out));
  }
  if (trace.events.empty()) throw ProfilerTraceError(path + " has no event to merge (no complete or instant event)");
  return trace;
}

}  // namespace lens_tools
