// A torch.profiler trace, read for `lens convert --merge`: its events on Unix time, so they sit beside lens's spans
// of the same rank on one timeline. The time base is the trace's own: Kineto's `baseTimeNanoseconds` (each `ts` in
// microseconds after it, as PyTorch 2.x writes), else `ts` that are Unix microseconds already (older Kineto). A
// trace with neither (PyTorch without Kineto writes `ts` from the profiler's start and no base) is refused with what
// to add. Complete events ("X") and instants ("i", "I") are kept, each on the track of its (pid, tid), named by the
// trace's thread_name where it has one; metadata, counters and flows are left out. Plain or gzip.
//
//   const ProfilerTrace trace = read_profiler_trace("rank0.pt.trace.json.gz");  // throws ProfilerTraceError
//   for (const ProfilerEvent& e : trace.events) ... e.start_ns (Unix), trace.tracks[e.track]
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lens_tools {

struct ProfilerEvent {
  std::string name, category;
  std::uint64_t start_ns = 0, duration_ns = 0;  // Unix nanoseconds; 0 for an instant
  int track = 0;                                // index into ProfilerTrace::tracks
  std::string args_json;                        // the event's args as a JSON object, or empty
  bool instant = false;
};

struct ProfilerTrace {
  std::string path;
  std::vector<std::string> tracks;
  std::vector<ProfilerEvent> events;
  std::uint64_t first_ns = UINT64_MAX;
};

class ProfilerTraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A torch.profiler trace and the rank it profiled (`--merge`, `--merge-rank`).
struct MergedProfile {
  int rank = 0;
  ProfilerTrace trace;
};

// Reads `path`; throws ProfilerTraceError naming the file and what is wrong (unreadable, not a trace, no time
// base, no event).
ProfilerTrace read_profiler_trace(const std::string& path);

}  // namespace lens_tools
