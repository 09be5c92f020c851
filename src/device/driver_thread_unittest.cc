// DriverThread (device/driver_thread.h): a call that returns is waited for; one that does not is given up at the
// bound, later ones are refused at once while it runs, and it is counted once.
#include "device/driver_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace lens::internal {
namespace {

using std::chrono::milliseconds;

TEST(DriverThread, ACallThatReturnsIsWaitedFor) {
  DriverThread t(DriverApi::kCuda, "lens-test", milliseconds(2000));
  auto result = std::make_shared<int>(0);
  EXPECT_EQ(t.run([result] { *result = 42; }, milliseconds(10'000)), DriverThread::Result::kDone);
  EXPECT_EQ(*result, 42);
  EXPECT_EQ(t.run([] {}, milliseconds(0)), DriverThread::Result::kStarted);
}

TEST(DriverThread, AWedgedCallIsGivenUpAtTheBoundCountedOnceAndLaterCallsAreRefusedUntilItReturns) {
  const std::uint64_t stuck_before = stuck_driver_calls(DriverApi::kNvml);
  auto wedged = std::make_shared<std::atomic<bool>>(true);
  auto later_ran = std::make_shared<std::atomic<bool>>(false);
  {
    DriverThread t(DriverApi::kNvml, "lens-test", milliseconds(50));
    EXPECT_EQ(t.run(
                  [wedged] {
                    while (*wedged) std::this_thread::sleep_for(milliseconds(1));
                  },
                  milliseconds(50)),
              DriverThread::Result::kTimedOut);
    EXPECT_EQ(stuck_driver_calls(DriverApi::kNvml), stuck_before + 1);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(t.run([later_ran] { *later_ran = true; }, milliseconds(10'000)), DriverThread::Result::kBusy);
    EXPECT_EQ(stuck_driver_calls(DriverApi::kNvml), stuck_before + 1) << "one call, counted once";
    *wedged = false;  // the driver comes back
    for (int i = 0; i < 1000 && t.run([] {}, milliseconds(10'000)) == DriverThread::Result::kBusy; ++i)
      std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(t.run([later_ran] { *later_ran = true; }, milliseconds(10'000)), DriverThread::Result::kDone);
  }
  EXPECT_TRUE(*later_ran);
  EXPECT_FALSE(*wedged);
}

TEST(DriverThread, DestroyingItDoesNotWaitForACallThatNeverReturns) {
  auto wedged = std::make_shared<std::atomic<bool>>(true);
  {
    DriverThread t(DriverApi::kCuda, "lens-test", milliseconds(10'000));
    EXPECT_EQ(t.run(
                  [wedged] {
                    while (*wedged) std::this_thread::sleep_for(milliseconds(1));
                  },
                  milliseconds(0)),
              DriverThread::Result::kStarted);
  }  // detached: the call owns what it touches
  *wedged = false;
}

}  // namespace
}  // namespace lens::internal
