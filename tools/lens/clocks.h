// Each host's clock offset, estimated from the links a run already has. Hosts' clocks differ by milliseconds in a
// real cluster, and the pipeline bubble and the timeline compare times of ranks on different hosts. A span that
// links to another (a pipeline stage's warm-up receive, `megatron.pp.recv_forward.linked`, to the sending stage's
// `megatron.p2p.send_forward`) cannot end before the span it links to started: every such pair of spans on two
// hosts bounds the difference of their clocks on one side, as a pair of NTP timestamps does. Links both ways
// between two hosts bound it on both sides (the estimate is the middle); links one way only bound it on one side:
// a receive that ended before its send began says the receiver's clock is behind by at least that much (the
// least correction that makes every link run forward is applied), and nothing can say by how much it is ahead.
//
//   ClockLinks links;
//   ... links.add(span) for every span read ...
//   const ClockFigures clocks = links.estimate();
//   clocks.offset_ns("node1")   // add to node1's times to put them on the reference host's clock
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "figures.h"
#include "run_reader.h"

namespace lens_tools {

class ClockLinks {
 public:
  // A send (a span a link may point to) or a span with links, of a process whose resource names its host.
  void add(const SpanRow& span);
  // Adds the links of spans read after this one's (a report merged from several threads' reads).
  void merge(ClockLinks&& later);
  ClockFigures estimate() const;

 private:
  struct Send {
    int host;
    std::uint64_t start_ns;
  };
  struct Receive {
    int host;
    std::uint64_t end_ns;
    std::uint64_t linked;  // the span id it links to
  };
  int host_index(const std::string& host);

  std::vector<std::string> hosts_;
  std::map<std::string, int, std::less<>> host_ids_;
  std::unordered_map<std::uint64_t, Send> sends_;
  std::vector<Receive> receives_;
  std::string reference_;  // the host of the lowest rank seen
  int reference_rank_ = -1;
  const Origin* last_origin_ = nullptr;
};

}  // namespace lens_tools
