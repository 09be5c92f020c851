// The clock offsets on links with known answers: two hosts whose clocks differ by a known amount, links one way and
// both ways, a host with no link, one host.
#include "clocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <deque>
#include <string_view>

#include "span_row_testing.h"

namespace lens_tools {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Spans of two or three hosts; each send and receive made with the clocks of its host.
class LinkedRun {
 public:
  void send_receive(const Origin& from, std::uint64_t send_start_ns, const Origin& to, std::uint64_t receive_end_ns) {
    ids_.push_back(hex(++next_id_));
    SpanRow send = span_row(from, "megatron.p2p.send_forward", send_start_ns, send_start_ns + 1);
    send.span_id = ids_.back();
    links_.add(send);
    SpanRow receive = span_row(to, "megatron.pp.recv_forward.linked", 0, receive_end_ns);
    receive.linked_span_ids = {ids_.back()};
    links_.add(receive);
  }
  void add(const SpanRow& span) { links_.add(span); }
  ClockFigures estimate() const { return links_.estimate(); }

 private:
  static std::string hex(std::uint64_t id) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
    return text;
  }
  ClockLinks links_;
  std::deque<std::string> ids_;  // the span ids the rows' views point into
  std::uint64_t next_id_ = 0;
};

Origin rank_on(int rank, const char* host) {
  Origin o;
  o.rank = rank;
  o.host = host;
  return o;
}

// node1's clock reads `behind_ms` less than node0's; a transfer takes 1 ms (true time).
constexpr std::uint64_t kTransfer = 1 * kMs;

TEST(ClockOffsets, LinksBothWaysBoundTheOffsetAndTheMiddleIsWithinHalfTheirWidth) {
  const Origin a = rank_on(0, "node0"), b = rank_on(2, "node1");
  const std::int64_t behind = 200 * static_cast<std::int64_t>(kMs);
  LinkedRun run;
  for (std::uint64_t t = 1000 * kMs; t < 1100 * kMs; t += 10 * kMs) {
    run.send_receive(a, t, b, t + kTransfer - static_cast<std::uint64_t>(behind));  // node0 -> node1
    run.send_receive(b, t - static_cast<std::uint64_t>(behind), a, t + kTransfer);  // node1 -> node0
  }
  const ClockFigures c = run.estimate();
  EXPECT_EQ(c.reference, "node0");
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_TRUE(c.corrected);
  EXPECT_TRUE(c.not_bounded.empty()) << c.not_bounded;
  EXPECT_NEAR(*c.hosts[0].offset_ms, 200, 1.0);  // within the transfer time
  EXPECT_LE(*c.hosts[0].at_least_ms, 200);
  EXPECT_GE(*c.hosts[0].at_most_ms, 200);
  EXPECT_EQ(c.hosts[0].links, 20u);
  EXPECT_EQ(c.offset_ns("node1"), std::llround(*c.hosts[0].offset_ms * 1e6));
  EXPECT_EQ(c.offset_ns("node0"), 0);
}

TEST(ClockOffsets, LinksOneWaySeeAClockBehindAndSayTheyCannotSeeOneAhead) {
  const Origin a = rank_on(0, "node0"), b = rank_on(2, "node1");
  LinkedRun behind, ahead;
  for (std::uint64_t t = 1000 * kMs; t < 1100 * kMs; t += 10 * kMs) {
    behind.send_receive(a, t, b, t + kTransfer - 50 * kMs);  // node1 reads 50 ms early: receives end before sends
    ahead.send_receive(a, t, b, t + kTransfer + 50 * kMs);   // node1 reads 50 ms late: nothing runs backwards
  }
  const ClockFigures seen = behind.estimate();
  EXPECT_TRUE(seen.corrected);
  // The least correction: the fastest transfer takes a microsecond.
  EXPECT_NEAR(*seen.hosts[0].offset_ms, 49.001, 1e-9);
  EXPECT_NEAR(*seen.hosts[0].at_least_ms, 49, 0.001);
  EXPECT_FALSE(seen.hosts[0].at_most_ms);
  EXPECT_NE(seen.not_bounded.find("node1: links run one way only"), std::string::npos) << seen.not_bounded;
  const ClockFigures unseen = ahead.estimate();
  EXPECT_FALSE(unseen.corrected);
  EXPECT_EQ(*unseen.hosts[0].offset_ms, 0);
  EXPECT_NE(unseen.not_bounded.find("node1"), std::string::npos);
}

TEST(ClockOffsets, AHostWithNoLinkIsUnknownAndOneHostIsNothingToEstimate) {
  const Origin a = rank_on(0, "node0"), b = rank_on(2, "node1"), c = rank_on(4, "node2");
  ClockLinks links;
  const SpanRow lone = span_row(c, "megatron.train_step", 0, 1);
  links.add(lone);
  EXPECT_TRUE(links.estimate().reference.empty()) << "one host";
  LinkedRun run;
  run.send_receive(a, 1000 * kMs, b, 1001 * kMs);
  run.send_receive(b, 1000 * kMs, a, 1001 * kMs);
  run.add(lone);
  const ClockFigures three = run.estimate();
  ASSERT_EQ(three.hosts.size(), 2u);
  EXPECT_EQ(three.hosts[1].host, "node2");
  EXPECT_FALSE(three.hosts[1].offset_ms);
  EXPECT_EQ(three.offset_ns("node2"), 0);
  EXPECT_NE(three.not_bounded.find("node2: no link to another host's spans"), std::string::npos) << three.not_bounded;
  EXPECT_FALSE(three.corrected);  // node1's offset is 0 within its bounds
}

}  // namespace
}  // namespace lens_tools
