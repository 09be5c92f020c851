// LENS_DCHECK: on where the build says (Debug, sanitizers), nothing at all in a release build.
#include "common/dcheck.h"

#include <gtest/gtest.h>

namespace lens::internal {
namespace {

TEST(Dcheck, AHoldingInvariantGoesOn) {
  int evaluated = 0;
  LENS_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, LENS_DCHECK_IS_ON ? 1 : 0);  // released builds do not evaluate it, side effects included
}

#if LENS_DCHECK_IS_ON
TEST(DcheckDeathTest, ABrokenInvariantNamesItselfAndAborts) {
  const int chunk_end = 4096;
  EXPECT_DEATH(LENS_DCHECK(chunk_end + 8 <= chunk_end),
               "LENS_DCHECK failed at .*dcheck_unittest.cc:[0-9]+: "
               "chunk_end \\+ 8 <= chunk_end");
}
#endif

}  // namespace
}  // namespace lens::internal
