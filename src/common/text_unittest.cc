#include <gtest/gtest.h>

#include "common/text.h"

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

}  // namespace
}  // namespace lens::internal
