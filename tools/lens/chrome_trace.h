// `lens convert --to chrome-json`: a timeline as the Trace Event format that Perfetto UI (ui.perfetto.dev) and the
// Chrome DevTools Performance panel open (CONTRACT §10). One process per rank process, named `rank R (pp S, dp D)`
// and sorted by rank; one thread per lane (lane 0 holds what nests; spans that overlap without nesting are on
// lanes of their own); complete ("X") events of category `lens` with the span's attributes and ids as args, the
// resource as the process's args; each link a flow arrow, forward in time (link_arrow: "s" where the linked span
// starts, "f" where the linking span starts or, for a receive that began before its send, at an "arrival" span of
// no duration where the data arrived), when both spans are in the output. `displayTimeUnit` and `metadata.startTime`
// (the wall-clock time of ts 0) let viewers align it with other traces, and `baseTimeNanoseconds`, the same time as
// Kineto's traces state it (each ts in microseconds after it), so tools that line up torch.profiler traces line this
// one up too. A torch.profiler trace of one rank can be merged in (`--merge`): its events on a process of their own,
// `rank R torch.profiler`, right after that rank's, on the same clock (the rank's host offset applied as to its
// spans). Gzip when the name ends in `.gz`.
#pragma once

#include <string>

#include "profiler_trace.h"
#include "timeline.h"

namespace lens_tools {

// Writes `timeline` (laid out) to `path`, with `merged` beside its rank when given; returns the number of events
// written, throws std::runtime_error when the file cannot be written or `merged`'s rank is not in the timeline.
std::size_t write_chrome_trace(const Timeline& timeline, const std::string& path,
                               const MergedProfile* merged = nullptr);

}  // namespace lens_tools
