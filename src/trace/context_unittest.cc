// W3C Trace Context and the binary form: round trips and every malformed header the specification names.
#include "lens/context.h"

#include <gtest/gtest.h>

namespace lens {
namespace {

constexpr const char* kValid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

// The step trace id is SHA-256 of the documented string (vectors from Python's hashlib).
TEST(StepTraceId, IsTheFirstSixteenBytesOfSha256OfTheDocumentedString) {
  auto hex = [](const TraceId& id) {
    return to_traceparent(SpanContext{id, SpanId{{1, 0, 0, 0, 0, 0, 0, 0}}, 0, false}).substr(3, 32);
  };
  EXPECT_EQ(hex(step_trace_id("run-1", 7)), "25a15996d4abecc533ec1ecd582fdda3");
  EXPECT_EQ(hex(step_trace_id("12345", 1)), "b4cb9e67681b475dcefe22816424791d");
  EXPECT_NE(hex(step_trace_id("run-1", 8)), hex(step_trace_id("run-1", 7)));
  EXPECT_TRUE(step_trace_id("", 0).is_valid());
}

// Both ends of a transfer derive each other's span id from the shared trace: first 8 bytes of SHA-256 of
// "lens.span/<32 hex trace id>/<key>" (vectors from Python's hashlib); a step's root is the key "lens.step.root".
TEST(DerivedSpanId, IsTheFirstEightBytesOfSha256OfTheDocumentedString) {
  auto hex = [](const SpanId& id) {
    return to_traceparent(SpanContext{step_trace_id("x", 0), id, 0, false}).substr(36, 16);
  };
  const TraceId trace = step_trace_id("run-1", 7);
  EXPECT_EQ(hex(step_root_span_id(trace)), "c617485437805dac");
  EXPECT_EQ(hex(derived_span_id(trace, "p2p/forward/mb3/0>1/send")), "99f62bdd566cf6b0");
  EXPECT_NE(hex(derived_span_id(trace, "p2p/forward/mb3/0>1/recv")),
            hex(derived_span_id(trace, "p2p/forward/mb3/0>1/send")));
  EXPECT_NE(hex(step_root_span_id(step_trace_id("run-1", 8))), hex(step_root_span_id(trace)));
}

TEST(Traceparent, RoundTrip) {
  std::optional<SpanContext> c = from_traceparent(kValid);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->is_remote);
  EXPECT_TRUE(c->is_sampled());
  EXPECT_EQ(c->trace_id.bytes[0], 0x0a);
  EXPECT_EQ(c->span_id.bytes[7], 0x31);
  EXPECT_EQ(to_traceparent(*c), kValid);
}

TEST(Traceparent, FlagsAreMaskedNotCompared) {
  auto c = from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff");
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->is_sampled());
  EXPECT_EQ(c->trace_flags, 0x03);  // unknown bits dropped
  auto unsampled = from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->is_sampled());
}

TEST(Traceparent, FutureVersionsMayCarryMoreFields) {
  EXPECT_TRUE(from_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").has_value());
  EXPECT_TRUE(from_traceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-holds"));
  EXPECT_FALSE(from_traceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x"));
}

TEST(Traceparent, MalformedHeadersAreRejected) {
  for (const char* bad : {
           "", "00",
           "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",     // version ff is invalid
           "00-00000000000000000000000000000000-b7ad6b7169203331-01",     // all-zero trace id
           "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",     // all-zero parent id
           "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",     // upper-case hex
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xx",  // version 00 has exactly 4 fields
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",      // short parent id
           "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",     // wrong separator
           "0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",     // non-hex version
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0z",     // non-hex flags
       }) {
    EXPECT_FALSE(from_traceparent(bad).has_value()) << bad;
  }
}

TEST(Tracestate, NormalisesOrDiscardsWhole) {
  EXPECT_EQ(normalize_tracestate(" rojo=00f067aa0ba902b7 , ,congo=t61rcWkgMzE"),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  EXPECT_EQ(normalize_tracestate("tenant@vendor=x"), "tenant@vendor=x");
  EXPECT_EQ(normalize_tracestate("novalue"), "");
  EXPECT_EQ(normalize_tracestate("Upper=1"), "");
  EXPECT_EQ(normalize_tracestate("a=1,=2"), "");
  std::string many;
  for (int i = 0; i < 33; ++i) many += (i ? ",k" : "k") + std::to_string(i) + "=v";
  EXPECT_EQ(normalize_tracestate(many), "");
}

TEST(BinaryContext, RoundTripAndRejection) {
  SpanContext c = *from_traceparent(kValid);
  BinaryContext b = to_binary(c);
  EXPECT_EQ(b.size(), 26u);
  std::optional<SpanContext> back = from_binary(b);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->trace_id, c.trace_id);
  EXPECT_EQ(back->span_id, c.span_id);
  EXPECT_EQ(back->trace_flags, c.trace_flags);
  EXPECT_TRUE(back->is_remote);
  BinaryContext zero{};
  EXPECT_FALSE(from_binary(zero).has_value());
  b[0] = 7;
  EXPECT_FALSE(from_binary(b).has_value());
}

}  // namespace
}  // namespace lens
