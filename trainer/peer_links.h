// The spans at the two ends of a transfer between ranks, linked to each other with no message between them: in the
// step layout every rank shares the step's trace, so each end derives its own span id and its peer's from the
// trace and a key that names the end (lens::derived_span_id, CONTRACT §6), starts its span with its own id and
// links to the peer's. In the segment layout the ranks' traces differ: the spans keep random ids and no such link.
//
//   PeerLinks links;
//   links.begin_step(step_trace);  // lens::step_trace_id(run id, iteration); an invalid id: no links
//   const std::string key = PeerLinks::transfer("forward", micro, rank, next_rank);
//   const lens::SpanId id = links.id(key + "/send");
//   lens::ScopedSpan send;
//   send.start(group, "megatron.p2p.send_forward", {}, {.span_id = &id});
//   links.link_to_peers(send, {key + "/recv"});
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "lens/lens.h"

namespace trainer {

class PeerLinks {
 public:
  void begin_step(const lens::TraceId& step_trace) { trace_ = step_trace; }

  // The key of the transfer of micro-batch `micro`'s `direction` ("forward" or "backward") from global rank `from`
  // to `to`; its ends add "/send" and "/recv".
  static std::string transfer(std::string_view direction, std::int64_t micro, int from, int to);
  // The key of `part` of the gradient sync on global rank `rank`: "bucket<k>" (one all-reduce) or "finish".
  static std::string grad_sync(std::string_view part, int rank);

  // This rank's span id for the end `key` (invalid, so ignored by StartOptions, outside the step layout).
  lens::SpanId id(std::string_view key) const;
  // Links a receive `span` to its send, the span at `peer_key`: a plain link, as a receive's to what it waited for
  // (the tools take it as "the send started before this receive ended", CONTRACT §6).
  void link_to_sender(lens::Span& span, const std::string& peer_key) const;
  // Links `span` to the span of each end in `peer_keys` with `lens.link.peer=true`: a send to its receive, a
  // replica's gradient sync to the others'; such a link says nothing of which started first, and the tools leave
  // it out of clocks and arrows. Nothing outside the step layout.
  void link_to_peers(lens::Span& span, const std::vector<std::string>& peer_keys) const;

 private:
  void link(lens::Span& span, const std::string& key, std::initializer_list<lens::Attribute> attributes) const;
  lens::TraceId trace_;
};

}  // namespace trainer
