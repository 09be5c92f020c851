// start_signal_free_thread: the thread blocks every signal, and the caller's mask is its own again after the start,
// whether the thread started or not.
#include "common/signal_free_thread.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <stdexcept>
#include <string>
#include <system_error>

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
  start_signal_free_thread("a test thread", "lens-test", [&] {
    const sigset_t mask = mask_of_this_thread();
    blocks_term = sigismember(&mask, SIGTERM) == 1;
    blocks_usr1 = sigismember(&mask, SIGUSR1) == 1;
  }).join();
  EXPECT_TRUE(blocks_term);
  EXPECT_TRUE(blocks_usr1);
  EXPECT_TRUE(same_signals(mask_of_this_thread(), before));
}

TEST(SignalFreeThread, CarriesItsSystemName) {
  char name[16] = {};
  start_signal_free_thread("a test thread", "lens-test", [&] {
    pthread_getname_np(pthread_self(), name, sizeof name);
  }).join();
  EXPECT_STREQ(name, "lens-test");
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
  EXPECT_THROW(start_signal_free_thread("a test thread", "lens-test", ThrowsWhenMoved{}), std::runtime_error);
  EXPECT_TRUE(same_signals(mask_of_this_thread(), before)) << "SIGTERM would stay blocked on the training thread";
}

// What std::thread throws when the system refuses a thread (EAGAIN) becomes lens's error, naming the thread and the
// limits that refuse one.
struct RefusedBySystem {
  RefusedBySystem() = default;
  RefusedBySystem(RefusedBySystem&&) {  // NOLINT: thrown on purpose
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  }
  void operator()() const {}
};

TEST(SignalFreeThread, AThreadTheSystemRefusesIsAConfigErrorThatNamesIt) {
  const sigset_t before = mask_of_this_thread();
  try {
    start_signal_free_thread("the export thread", "lens-export", RefusedBySystem{});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("lens: cannot start the export thread: Resource temporarily unavailable", 0),
              0)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("ulimit -u and -v"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same_signals(mask_of_this_thread(), before));
}

}  // namespace
}  // namespace lens::internal
