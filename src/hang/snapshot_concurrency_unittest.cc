// A hang snapshot reads other threads' open-span slots while they write them (a seqlock, trace/span_drain.cc):
// every copy it keeps must be one whole span, never a mix of two. Run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lens/megatron.h"
#include "lens/span.h"
#include "lens/telemetry.h"
#include "trace/record.h"
#include "trace/span_drain.h"

namespace lens {
namespace {

namespace mg = megatron::group;

// Names (copied into the span, as run-time text is) whose attribute says which they are: a torn copy would pair
// one name with another's number.
constexpr const char* kNames[] = {"a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg", "hhhhhhhh"};

TEST(HangSnapshotConcurrency, EveryCopyKeptIsOneWholeSpan) {
  // A non-exporting rank keeping positions (the watchdog on, never due): spans start and end, nothing is queued.
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = "all";
  c.hang_signal = 0;
  c.hang_timeout_ms = 86400000;
  c.file_dir = ::testing::TempDir() + "lens-hang-concurrency-" + std::to_string(::getpid());
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 2});  // single_rank: rank 1 exports
  internal::SpanDrain* drain = internal::g_span_drain.load();
  ASSERT_NE(drain, nullptr);

  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&stop, w] {
      for (std::int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::int64_t k = (i + w) % 8;
        Span outer(mg::step, std::string_view(kNames[k]), {{"k", k}});
        Span inner(mg::layer, std::string_view(kNames[7 - k]), {{"k", 7 - k}});
        inner.set_attribute("again", k);
        inner.add_event("e", {{"k", k}});
      }
    });
  }
  std::uint64_t kept = 0;
  // Until many copies were kept (the writers take a moment to start), within a bound.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int round = 0; kept < 20000 && std::chrono::steady_clock::now() < until; ++round) {
    for (const auto& copy : drain->open_spans()) {
      const internal::SpanView view(copy.record.data());
      std::int64_t k = -1;
      view.for_each_attribute([&](const internal::AttributeView& a) {
        if (a.key == "k") k = a.as_int();
      });
      ASSERT_GE(k, 0) << view.name();
      ASSERT_EQ(view.name(), kNames[k]);
      ++kept;
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_GE(kept, 20000u);
  t.shutdown();
}

}  // namespace
}  // namespace lens
