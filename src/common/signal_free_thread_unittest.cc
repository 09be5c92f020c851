// start_signal_free_thread: the thread blocks every signal, and the caller's mask is its own again after the start,
// whether the thread started or not.
#include "common/signal_free_thread.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <stdexcept>

namespace lens::internal {
namespace {

sigset_t mask_of_this_thread() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return mask;
}

bool same_signals(const sigset_t& a, const sigset_t& b) {
  for (int s = 1; s < SIGRTMAX; ++s)
    if (sigismember(&a, s) != sigismember(&b, s)) return false;
  return true;
}

TEST(SignalFreeThread, BlocksEverySignalAndLeavesTheCallersMask) {
  const sigset_t before = mask_of_this_thread();
  bool blocks_term = false, blocks_usr1 = false;
  start_signal_free_thread([&] {
    const sigset_t mask = mask_of_this_thread();
    blocks_term = sigismember(&mask, SIGTERM) == 1;
    blocks_usr1 = sigismember(&mask, SIGUSR1) == 1;
  }).join();
  EXPECT_TRUE(blocks_term);
  EXPECT_TRUE(blocks_usr1);
  EXPECT_TRUE(same_signals(mask_of_this_thread(), before));
}

// std::thread throws before any thread exists when the body cannot be moved into it, as it does when the system
// refuses a thread (std::system_error): the caller's mask is restored all the same.
struct ThrowsWhenMoved {
  ThrowsWhenMoved() = default;
  ThrowsWhenMoved(ThrowsWhenMoved&&) { throw std::runtime_error("no thread"); }  // NOLINT: thrown on purpose
  void operator()() const {}
};

TEST(SignalFreeThread, AStartThatThrowsLeavesTheCallersMask) {
  const sigset_t before = mask_of_this_thread();
  EXPECT_THROW(start_signal_free_thread(ThrowsWhenMoved{}), std::runtime_error);
  EXPECT_TRUE(same_signals(mask_of_this_thread(), before)) << "SIGTERM would stay blocked on the training thread";
}

}  // namespace
}  // namespace lens::internal
