// The one JSON string escaper: what every strict parser must accept, whatever bytes lens is handed.
#include "common/json_escape.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace lens::internal {
namespace {

// What a strict parser reads back from json_string(input); nlohmann refuses invalid UTF-8 with an exception.
std::string parsed(std::string_view input) { return nlohmann::json::parse(json_string(input)).get<std::string>(); }

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(JsonEscape, PrintableTextQuotesAndBackslashes) {
  EXPECT_EQ(json_string("megatron.train_step"), "\"megatron.train_step\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(parsed("a\"b\\c/d"), "a\"b\\c/d");
}

TEST(JsonEscape, ControlBytesAreEscapedNotDropped) {
  EXPECT_EQ(json_string("a\nb\tc\x1b[2J"), "\"a\\nb\\tc\\u001b[2J\"");
  EXPECT_EQ(json_string(std::string_view("\0x", 2)), "\"\\u0000x\"");
  EXPECT_EQ(parsed("\r\b\f\x01\x1f"), "\r\b\f\x01\x1f");
}

TEST(JsonEscape, ValidUtf8IsKeptByteForByte) {
  for (const std::string text : {"\xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80",
                                 "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF", "\xEE\x80\x80"})
    EXPECT_EQ(parsed(text), text) << text;
}

// `n` replacement characters.
std::string replaced(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += kReplacement;
  return out;
}

TEST(JsonEscape, EachByteThatStartsNoValidSequenceIsOneReplacementCharacter) {
  EXPECT_EQ(parsed("\x80"), replaced(1));                                 // a stray continuation byte
  EXPECT_EQ(parsed("ab\xC3"), "ab" + replaced(1));                        // a two-byte character cut at the end
  EXPECT_EQ(parsed("\xE2\x82x"), replaced(2) + "x");                      // a three-byte one cut before ASCII
  EXPECT_EQ(parsed("\xC0\x80"), replaced(2));                             // an overlong NUL
  EXPECT_EQ(parsed("\xE0\x80\x80"), replaced(3));                         // an overlong three-byte form
  EXPECT_EQ(parsed("\xED\xA0\x80"), replaced(3));                         // a UTF-16 surrogate
  EXPECT_EQ(parsed("\xF4\x90\x80\x80"), replaced(4));                     // past U+10FFFF
  EXPECT_EQ(parsed("\xF5\x80"), replaced(2));                             // never a lead byte
  EXPECT_EQ(parsed(std::string("\xFF\xFE") + "ok"), replaced(2) + "ok");  // UTF-16's byte-order mark
}

TEST(JsonEscape, TheWorstCaseFitsTheRoomItAsksFor) {
  const std::string controls(1000, '\x01');
  std::string out(max_escaped_size(controls.size()), '\0');
  EXPECT_EQ(static_cast<std::size_t>(escape_json(controls, out.data()) - out.data()), out.size());
  std::string appended = "x";
  append_json_escaped(appended, "\xC3");
  EXPECT_EQ(appended, "x" + kReplacement);
}

}  // namespace
}  // namespace lens::internal
