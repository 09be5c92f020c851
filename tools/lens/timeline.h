// The spans a picture of a run draws: every span of each process, or only those inside chosen steps, kept with
// their ids, links and attributes, and laid out on tracks where they nest strictly (a span that overlaps another
// without nesting in it, such as concurrent grad_sync.start buckets, goes to a lane of its own). Device spans
// (docs/GPU.md) go to lanes of their own below the host's: a rank's GPU track, what the device did and when. What `lens
// convert` writes as Chrome JSON and the HTML page's timeline draws. Memory: the spans kept (a second read of the
// files).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clocks.h"
#include "report.h"
#include "run_reader.h"

namespace lens_tools {

struct TimelineSpan {
  std::uint32_t name = 0;  // index into Timeline::names
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint64_t span_id = 0, parent_span_id = 0;  // 0: none
  std::vector<std::uint64_t> linked_span_ids;
  std::string args_json;  // JSON members, without braces
  int lane = 0;           // 0: the process's main track
  bool device = false;    // a device span (`<name>.device`, docs/GPU.md): on the process's device lanes
};

struct TimelineProcess {
  Origin origin;                    // rank, pid, resource (resource_args)
  std::vector<TimelineSpan> spans;  // sorted by start, then longest first, once laid out
  int lanes = 0;                    // all: the host's, then the device's
  int host_lanes = 0;               // lanes [host_lanes, lanes) hold device spans: the GPU's own track
};

class Timeline : public RunVisitor {
 public:
  // `windows`: per process_key(), the step windows to keep spans from; empty keeps every span of every process.
  // `clocks`: the hosts' offsets when the caller estimated them already (lens report's, from the same files);
  // otherwise the timeline estimates them from the links it reads.
  explicit Timeline(std::map<std::string, std::vector<StepWindow>> windows = {},
                    std::optional<ClockFigures> known_clocks = std::nullopt)
      : windows_(std::move(windows)), known_clocks_(std::move(known_clocks)) {}
  void span(const SpanRow& span) override;
  void metric(const MetricPoint&) override {}

  // Puts every host's spans on the reference host's clock (clocks.h; the known offsets, else its estimate), sorts
  // each process's spans and gives each a lane; call once, after the read.
  void lay_out();

  // What lay_out() added to `rank`'s times (its host's clock offset), for what is put beside it (a torch.profiler
  // trace); throws std::runtime_error when the timeline has no span of `rank`.
  std::int64_t offset_of_rank(int rank) const;

  ClockFigures clocks;  // what lay_out() corrected by
  std::vector<std::string> names;
  std::map<std::string, TimelineProcess> processes;  // by process_key(): rank order within a run
  std::uint64_t first_ns = UINT64_MAX, last_ns = 0;

 private:
  bool kept(const std::string& key, const SpanRow& s) const;
  std::uint32_t name_index(std::string_view name);

  std::map<std::string, std::vector<StepWindow>> windows_;
  std::map<std::string, std::uint32_t, std::less<>> name_ids_;
  std::optional<ClockFigures> known_clocks_;
  ClockLinks clock_links_;  // only without known clocks
};

// The name of a rank's process in a picture (the HTML page's lanes, the Chrome JSON's processes): `rank R (pp S,
// dp D)`, its pipeline stage and data-parallel replica in Megatron's rank order.
std::string rank_process_name(const Origin& origin);

// Where the arrow of a link is drawn: from the linked span (the sender) to the span that links to it (the
// receiver), always forward in time when the clocks agree. It leaves the sender where the sender starts and ends
// where the receiver starts, unless the receiver started first (a receive waits for its send): then it ends where
// the data arrived, at the earlier of the two ends, marked by an "arrival" span of no duration inside the receiver
// (viewers bind an arrow to where a span starts; of no duration, it nests wherever it falls). With clocks that
// disagree (the receiver ended before the sender began) the arrow ends where the receiver starts: bound, though
// backwards.
struct LinkArrow {
  std::uint64_t from_ns = 0, to_ns = 0;
  bool arrival = false;  // to_ns is an arrival marker's, inside the receiver
};
LinkArrow link_arrow(const TimelineSpan& sender, const TimelineSpan& receiver);

}  // namespace lens_tools
