#include "clocks.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "common/dcheck.h"

namespace lens_tools {

std::int64_t ClockFigures::offset_ns(const std::string& host) const {
  for (const HostClock& h : hosts)
    if (h.host == host && h.offset_ms) return std::llround(*h.offset_ms * 1e6);
  return 0;
}

int ClockLinks::host_index(const std::string& host) {
  auto [it, added] = host_ids_.try_emplace(host, static_cast<int>(hosts_.size()));
  if (added) hosts_.push_back(host);
  return it->second;
}

void ClockLinks::add(const SpanRow& s) {
  const Origin& o = *s.origin;
  if (o.host.empty()) return;
  if (&o != last_origin_) {  // spans come a batch of one process at a time: once a batch, every host is known
    last_origin_ = &o;
    host_index(o.host);
    if (o.rank >= 0 && (reference_rank_ < 0 || o.rank < reference_rank_)) reference_rank_ = o.rank, reference_ = o.host;
  }
  // What a link points to: lens's pipeline sends (memory for these, not for every span of the run).
  if (s.name.starts_with("megatron.p2p.send")) {
    if (const std::uint64_t id = parse_span_id(s.span_id)) sends_[id] = {host_index(o.host), s.start_ns};
  }
  for (std::string_view link : s.linked_span_ids)
    if (const std::uint64_t id = parse_span_id(link)) receives_.push_back({host_index(o.host), s.end_ns, id});
}

void ClockLinks::merge(ClockLinks&& later) {
  std::vector<int> host_now;  // the later one's host index -> this one's
  for (const std::string& host : later.hosts_) host_now.push_back(host_index(host));
  if (later.reference_rank_ >= 0 && (reference_rank_ < 0 || later.reference_rank_ < reference_rank_))
    reference_rank_ = later.reference_rank_, reference_ = later.reference_;
  for (const auto& [id, send] : later.sends_)
    sends_.insert_or_assign(id, Send{host_now[static_cast<std::size_t>(send.host)], send.start_ns});
  for (const Receive& r : later.receives_)
    receives_.push_back({host_now[static_cast<std::size_t>(r.host)], r.end_ns, r.linked});
  last_origin_ = nullptr;
}

namespace {

// What the links between two hosts say of d = offset(a) - offset(b): d <= upper (links a -> b: a receive on b ended
// at least `upper` after its send on a started, by their clocks) and d >= lower (links b -> a).
struct PairBound {
  std::optional<std::int64_t> upper, lower;
  std::uint64_t links = 0;
};

// The offset of b from a's (d = offset(a) - offset(b)), and what HostClock says of it.
struct Step {
  std::int64_t d_ns = 0;
  bool bounded_both = false;
};

// No transfer between two hosts takes less: the least correction leaves the tightest link this long, so that its
// arrow still runs forward.
constexpr std::int64_t kLeastTransferNs = 1000;

Step step_of(const PairBound& b) {
  if (b.upper && b.lower) return {(*b.upper + *b.lower) / 2, true};
  // One side only: the least correction under which every link runs forward (none if they already do).
  if (b.upper) return {*b.upper >= kLeastTransferNs ? 0 : *b.upper - kLeastTransferNs, false};
  return {*b.lower <= -kLeastTransferNs ? 0 : *b.lower + kLeastTransferNs, false};
}

double ms_of(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

ClockFigures ClockLinks::estimate() const {
  ClockFigures out;
  if (hosts_.size() < 2 || reference_.empty()) return out;
  const int n = static_cast<int>(hosts_.size());
  std::map<std::pair<int, int>, PairBound> pairs;  // (a, b) with a < b
  for (const Receive& r : receives_) {
    const auto send = sends_.find(r.linked);
    if (send == sends_.end() || send->second.host == r.host) continue;
    // offset(sender) - offset(receiver) <= receive end - send start, in their clocks
    const std::int64_t gap = static_cast<std::int64_t>(r.end_ns) - static_cast<std::int64_t>(send->second.start_ns);
    const int a = std::min(send->second.host, r.host), b = std::max(send->second.host, r.host);
    PairBound& bound = pairs[{a, b}];
    ++bound.links;
    if (send->second.host == a)
      bound.upper = std::min(bound.upper.value_or(gap), gap);
    else
      bound.lower = std::max(bound.lower.value_or(-gap), -gap);
  }
  // From the reference outward, each host through the pair that bounds it best (both sides before one side).
  const int reference = host_ids_.at(reference_);
  std::vector<std::optional<std::int64_t>> offset(static_cast<std::size_t>(n));
  std::vector<HostClock> clocks(static_cast<std::size_t>(n));
  offset[static_cast<std::size_t>(reference)] = 0;
  std::vector<std::string> one_sided, unlinked;
  for (bool both_only : {true, false}) {
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [ab, bound] : pairs) {
        const auto [a, b] = ab;
        const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
        if (offset[ua].has_value() == offset[ub].has_value()) continue;
        const Step s = step_of(bound);
        if (both_only && !s.bounded_both) continue;
        const bool from_a = offset[ua].has_value();
        const std::size_t known = from_a ? ua : ub, fresh = from_a ? ub : ua;
        // d = offset(a) - offset(b): offset(b) = offset(a) - d; offset(a) = offset(b) + d
        offset[fresh] = from_a ? *offset[known] - s.d_ns : *offset[known] + s.d_ns;
        HostClock& h = clocks[fresh];
        h.links = bound.links;
        // The bounds on the fresh host's offset against the known one's.
        auto side = [&](const std::optional<std::int64_t>& v) {
          return v ? Figure(ms_of(from_a ? *offset[known] - *v : *offset[known] + *v)) : Figure();
        };
        h.at_least_ms = from_a ? side(bound.upper) : side(bound.lower);
        h.at_most_ms = from_a ? side(bound.lower) : side(bound.upper);
        if (!s.bounded_both) one_sided.push_back(hosts_[fresh]);
        grew = true;
      }
    }
  }
  out.reference = reference_;
  for (int i = 0; i < n; ++i) {
    if (i == reference) continue;
    const auto ui = static_cast<std::size_t>(i);
    HostClock h = clocks[ui];
    h.host = hosts_[ui];
    if (offset[ui]) {
      h.offset_ms = ms_of(*offset[ui]);
      out.corrected = out.corrected || *offset[ui] != 0;
    } else {
      unlinked.push_back(h.host);
    }
    out.hosts.push_back(std::move(h));
  }
  std::sort(out.hosts.begin(), out.hosts.end(), [](const HostClock& a, const HostClock& b) { return a.host < b.host; });
  auto list = [](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    std::string text;
    for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
    return text;
  };
  if (!one_sided.empty())
    out.not_bounded = list(one_sided) + ": links run one way only, so a clock ahead by any amount is not seen";
  if (!unlinked.empty())
    out.not_bounded += (out.not_bounded.empty() ? "" : "; ") + list(unlinked) +
                       ": no link to another host's spans, so its offset is unknown";
  LENS_DCHECK(out.hosts.size() + 1 == hosts_.size());
  return out;
}

}  // namespace lens_tools
