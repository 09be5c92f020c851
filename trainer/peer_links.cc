#include "peer_links.h"

namespace trainer {

std::string PeerLinks::transfer(std::string_view direction, std::int64_t micro, int from, int to) {
  return "p2p/" + std::string(direction) + "/mb" + std::to_string(micro) + "/" + std::to_string(from) + ">" +
         std::to_string(to);
}

std::string PeerLinks::grad_sync(std::string_view part, int rank) {
  return "grad_sync/" + std::string(part) + "/" + std::to_string(rank);
}

lens::SpanId PeerLinks::id(std::string_view key) const {
  return trace_.is_valid() ? lens::derived_span_id(trace_, key) : lens::SpanId{};
}

void PeerLinks::link(lens::Span& span, const std::string& key,
                     std::initializer_list<lens::Attribute> attributes) const {
  // The peer's span is kept or dropped as this one is: a trace-id ratio decides the step alike on every rank.
  const auto sampled = static_cast<std::uint8_t>(span.context().trace_flags & lens::SpanContext::kSampledFlag);
  span.add_link(lens::SpanContext{trace_, lens::derived_span_id(trace_, key), sampled, true}, attributes);
}

void PeerLinks::link_to_sender(lens::Span& span, const std::string& peer_key) const {
  if (trace_.is_valid()) link(span, peer_key, {});
}

void PeerLinks::link_to_peers(lens::Span& span, const std::vector<std::string>& peer_keys) const {
  if (!trace_.is_valid()) return;
  for (const std::string& key : peer_keys) link(span, key, {{"lens.link.peer", true}});
}

}  // namespace trainer
