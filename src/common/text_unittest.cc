#include "common/text.h"

#include <gtest/gtest.h>

namespace lens::internal {
namespace {

TEST(Text, TrimLowerSplitJoin) {
  EXPECT_EQ(trim(" \t a b \n"), "a b");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(to_lower("Per_STEP"), "per_step");
  EXPECT_EQ(split("a,,b,", ','), (std::vector<std::string_view>{"a", "", "b", ""}));
  EXPECT_EQ(split("", ','), (std::vector<std::string_view>{""}));
  EXPECT_EQ(join({"a", "b"}, ", "), "a, b");
}

TEST(Text, EditDistanceAndClosest) {
  EXPECT_EQ(edit_distance("per_stp", "per_step"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest("laeyr", {"job", "layer", "step"}), "layer");
  EXPECT_EQ(closest("x", {}), "");
}

TEST(Text, PercentDecode) {
  EXPECT_EQ(percent_decode("Bearer%20abc%3d"), "Bearer abc=");
  EXPECT_EQ(percent_decode("plain"), "plain");
  EXPECT_FALSE(percent_decode("bad%2").has_value());
  EXPECT_FALSE(percent_decode("bad%zz").has_value());
  EXPECT_FALSE(percent_decode("%").has_value());
}

TEST(Text, PrintableExcerptEscapesControlBytesAndBoundsLength) {
  EXPECT_EQ(printable_excerpt("bad \x1b[2Jgateway\r\nX-Forged: 1"), "bad \\x1b[2Jgateway\\x0d\\x0aX-Forged: 1");
  EXPECT_EQ(printable_excerpt(std::string_view("a\0b\x7f", 4)), "a\\x00b\\x7f");
  EXPECT_EQ(printable_excerpt("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 kept
  // Bidirectional formatting characters (U+202E reads what follows backwards) are shown as escapes, not applied.
  EXPECT_EQ(terminal_text("megatron.\xe2\x80\xae"
                          "ptts\nnext"),
            "megatron.\\u202eptts\nnext");
  EXPECT_EQ(printable_excerpt("a\xe2\x81\xa6"
                              "b\xe2\x80\x8f"
                              "c\xd8\x9c"
                              "d"),
            "a\\u2066b\\u200fc\\u061cd");
  EXPECT_EQ(printable_excerpt("\xe2\x80\x94 \xe2\x80\x2a"), "\xe2\x80\x94 \xe2\x80\x2a");  // an em dash; not UTF-8
  EXPECT_EQ(printable_excerpt(std::string(1000, 'x'), 8), "xxxxxxxx...");
}

TEST(Text, RedactUrlTakesOutCredentials) {
  EXPECT_EQ(redact_url("https://user:token@collector:4318/v1/traces"), "https://***@collector:4318/v1/traces");
  EXPECT_EQ(redact_url("https://collector:4318/v1/traces?api_key=SECRET&x=1"), "https://collector:4318/v1/traces?***");
  EXPECT_EQ(redact_url("http://a:b@host?k=v"), "http://***@host?***");
  EXPECT_EQ(redact_url("http://localhost:4318"), "http://localhost:4318");
  EXPECT_EQ(redact_url("localhost:4317"), "localhost:4317");
  EXPECT_EQ(redact_url("http://host/path@x"), "http://host/path@x");  // an '@' in the path is not userinfo
  EXPECT_EQ(redact_url("http://host:4317#token"), "http://host:4317#***");
}

// The one number parser: the whole text, in range, or nothing; never clamped, never thrown.
TEST(Text, WholeNumberTakesTheWholeTextInRangeOrNothing) {
  EXPECT_EQ(whole_number("42"), 42);
  EXPECT_EQ(whole_number("+7"), 7);
  EXPECT_EQ(whole_number("-3"), -3);
  EXPECT_EQ(whole_number("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(whole_number("2147483648", 0, INT32_MAX), std::nullopt);
  EXPECT_EQ(whole_number("9223372036854775808"), std::nullopt);
  EXPECT_EQ(whole_number("99999999999999999999"), std::nullopt);
  for (const char* bad : {"", "+", "-", " 1", "1 ", "12a", "0x10", "1e3", "1.0", "++1"})
    EXPECT_EQ(whole_number(bad), std::nullopt) << "'" << bad << "'";
  EXPECT_EQ(whole_number("0", 1, 10), std::nullopt);
  EXPECT_EQ(whole_number("10", 1, 10), 10);
}

}  // namespace
}  // namespace lens::internal
