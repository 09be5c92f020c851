// Threads that check groups while another thread switches them: the switch must be race-free (run under
// ThreadSanitizer) and every reader must see the new set.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "groups/switch.h"
#include "lens/groups.h"
#include "lens/megatron.h"
#include "lens/ranks.h"

namespace lens {
namespace {

namespace mg = megatron::group;

TEST(GroupSwitchConcurrency, ReadersSeeEveryReplacementAndEndOnTheLastOne) {
  internal::install_span_groups(megatron::catalogue().all(), GroupSet{mg::job});
  std::atomic<bool> stop{false};
  std::atomic<int> saw_layer{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      bool seen = false;
      while (!stop.load(std::memory_order_acquire)) {
        if (!seen && is_enabled(mg::layer)) {
          seen = true;
          saw_layer.fetch_add(1);
        }
      }
      EXPECT_TRUE(is_enabled(mg::step));  // the final set, published before `stop`
    });
  }
  for (int i = 0; i < 2000; ++i) set_enabled_span_groups(i % 2 ? GroupSet{mg::layer} : GroupSet{mg::job});
  set_enabled_span_groups(GroupSet{mg::layer});
  while (saw_layer.load() < 3) std::this_thread::yield();
  set_enabled_span_groups(GroupSet{mg::step});
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(saw_layer.load(), 3);
  internal::install_span_groups({}, {});
}

TEST(RegistryConcurrency, ParallelRegistrationAndLookupAreSafe) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        std::string name = "strategy_" + std::to_string(t) + "_" + std::to_string(i);
        register_rank_strategy(name, [](const RankStrategyInput&) { return true; });
        EXPECT_TRUE(rank_exports(name, RankStrategyInput{}));
        EXPECT_TRUE(has_rank_strategy("single_rank"));
        unregister_rank_strategy(name);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(rank_strategy_names().size(), 4u);  // only the built-ins remain
}

}  // namespace
}  // namespace lens
