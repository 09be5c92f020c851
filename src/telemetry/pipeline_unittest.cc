// The pipeline under pressure: a full queue, a failing exporter, a hanging exporter, several producers. Also
// run under ThreadSanitizer.
#include "telemetry/pipeline.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "lens/log.h"
#include "lens/metrics.h"
#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Waits up to `limit` for `done()`: a generous bound on a condition, not a timing figure.
template <typename F>
bool eventually(F done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  for (auto until = steady_clock::now() + limit; steady_clock::now() < until;) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return done();
}

std::size_t exported_spans(testing::Capture& c) {
  std::lock_guard lock(c.exporter().mutex);
  return c.exporter().spans;
}

// After the export thread drained a batch and went idle, the next full batch wakes it: the producer's wake-up test
// must not compare a stale count with the batch size, which would leave the batch waiting for the schedule delay
// (here 60 s) while new spans are dropped.
TEST(Pipeline, ABatchAfterTheExportThreadWentIdleWakesItAgain) {
  Config config = testing::capture_config("job");
  config.span_batch.max_export_batch_size = 64;
  testing::Capture c(config);
  // A partial batch waits for the schedule delay, as OpenTelemetry's batch processor does: what must not wait is
  // a full one.
  std::size_t pushed = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < (round == 0 ? 100 : 64); ++i, ++pushed) {
      LENS_SPAN(mg::job, "burst");
    }
    ASSERT_TRUE(eventually([&] { return exported_spans(c) + 63 >= pushed; }))
        << "round " << round << ": " << exported_spans(c) << " of " << pushed << " exported; the wake-up was lost";
    std::this_thread::sleep_for(milliseconds(20));  // the export thread is asleep again
  }
  EXPECT_EQ(c.telemetry().span_stats().dropped(), 0u);
}

// A thread's state is freed once it ends: 3,000 short-lived threads with one span each must not hold 3,000 states.
TEST(Pipeline, AThreadsStateIsFreedAfterItEnds) {
  testing::Capture c(testing::capture_config("job"));
  internal::SpanDrain* p = internal::g_span_drain.load();
  ASSERT_NE(p, nullptr);
  constexpr int kThreads = 3000;
  std::size_t most_states = 0;
  for (int i = 0; i < kThreads; ++i) {
    std::thread([] { LENS_SPAN(mg::job, "short-lived"); }).join();
    most_states = std::max(most_states, p->thread_states());
  }
  // A thread's end wakes the export thread (the schedule delay here is 60 s), which frees its state.
  EXPECT_TRUE(eventually([&] { return p->thread_states() <= 1; })) << p->thread_states() << " states left";
  EXPECT_LT(most_states, 1000u) << "the states of ended threads piled up";
  EXPECT_EQ(p->queue_budget().in_use(), 0u) << "and their chunks with them";
  ASSERT_TRUE(c.telemetry().force_flush());
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, static_cast<std::uint64_t>(kThreads)) << "the counts of freed states are kept";
  EXPECT_EQ(s.exported, static_cast<std::uint64_t>(kThreads));
}

// A span started on a thread that ends before the span does: the state waits for it.
TEST(Pipeline, AStateOutlivesItsThreadWhileOneOfItsSpansIsOpen) {
  testing::Capture c(testing::capture_config("job"));
  Span carried;
  std::thread([&] { carried = Span(mg::job, "carried"); }).join();
  ASSERT_TRUE(c.telemetry().force_flush());
  ASSERT_TRUE(c.telemetry().force_flush());
  carried.set_attribute("after", 1);  // would touch freed memory (ASan) if the state had gone
  carried.end();
  ASSERT_TRUE(c.telemetry().force_flush());
  EXPECT_EQ(exported_spans(c), 1u);
  EXPECT_EQ(testing::attribute(c.span("carried"), "after"), testing::json({{"intValue", "1"}}));
}

// OTEL_BSP_MAX_QUEUE_SIZE bounds the queues of the whole process, not each thread's (here room for 8192 spans of
// 1 KiB: 8 MiB for all 32 threads together).
TEST(Pipeline, QueueMemoryIsBoundedPerProcessNotPerThread) {
  Config config = testing::capture_config("job");
  config.span_batch.max_queue_size = 8192;
  testing::Capture c(config);
  internal::SpanDrain* p = internal::g_span_drain.load();
  c.exporter().hang = true;  // nothing leaves the queues
  { LENS_SPAN(mg::job, "held"); }
  ASSERT_TRUE(eventually([&] { return c.telemetry().span_stats().queued == 1; }));
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 5000; ++i) {
        LENS_SPAN(mg::job, "flood", {"i", i}, {"payload", "0123456789012345678901234567890123456789"});
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(p->queue_budget().in_use(), p->queue_budget().limit());
  EXPECT_EQ(p->queue_budget().limit(), 8192u * internal::SpanDrain::kQueueBytesPerSpan);
  SpanStats during = c.telemetry().span_stats();
  EXPECT_GT(during.dropped_queue_full, 0u) << "160,000 spans of ~190 B do not fit 8 MiB";
  c.exporter().release();
  ASSERT_TRUE(c.telemetry().shutdown(std::chrono::seconds(60)));
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
  EXPECT_EQ(s.produced, 1u + 32u * 5000u);
}

// For logs: a batch emitted after the export thread went idle is exported without waiting the delay.
TEST(Pipeline, ALogBatchAfterTheExportThreadWentIdleWakesItAgain) {
  Config config = testing::capture_config("job");
  config.logs_enabled = true;
  config.log_batch.schedule_delay_ms = 60000;
  config.log_batch.max_export_batch_size = 32;
  testing::Capture c(config);
  auto logs_exported = [&] { return c.telemetry().log_stats().exported; };
  std::uint64_t emitted = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 40; ++i, ++emitted) log(Severity::kInfo, "burst");
    ASSERT_TRUE(eventually([&] { return logs_exported() + 31 >= emitted; }))
        << "round " << round << ": " << logs_exported() << " of " << emitted << " exported";
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(c.telemetry().log_stats().dropped(), 0u);
}

// For metrics: no queue, no batch; the export thread wakes for the interval even while no span or log
// record comes (the span schedule delay here is 60 s).
TEST(Pipeline, MetricsAreExportedOnTheirIntervalWhileNothingElseHappens) {
  Config config = testing::capture_config("job");
  config.metrics_enabled = true;
  config.metric_export_interval_ms = 50;
  testing::Capture c(config);
  auto metric_exports = [&] {
    std::lock_guard lock(c.exporter().mutex);
    return c.exporter().metrics.size();
  };
  EXPECT_TRUE(eventually([&] { return metric_exports() >= 5; })) << metric_exports() << " metric exports";
}

TEST(Pipeline, AFullQueueDropsAndCountsExactly) {
  Config config = testing::capture_config("job");
  config.span_batch.max_queue_size = 64;
  config.span_batch.max_export_batch_size = 16;
  testing::Capture c(config);
  c.exporter().hang = true;  // nothing leaves the queue until released
  constexpr int kProduced = 1000;
  for (int i = 0; i < kProduced; ++i) {
    LENS_SPAN(mg::job, "flood", {"i", i});
  }
  SpanStats during = c.telemetry().span_stats();
  EXPECT_GT(during.dropped_queue_full, 0u);
  c.exporter().release();
  ASSERT_TRUE(c.telemetry().shutdown());
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, static_cast<std::uint64_t>(kProduced));
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
  EXPECT_EQ(s.exported, c.exporter().spans);
  EXPECT_EQ(s.queued, 0u);
}

// Durations set in code are clamped: an interval of INT64_MAX wrote metrics in a loop (its deadline overflowed),
// an export timeout of INT64_MAX dropped every batch, a schedule delay of 0 spun a core while idle.
TEST(Pipeline, ExtremeDurationsSetInCodeNeitherFloodNorDropNorSpin) {
  Config config = testing::capture_config("job");
  config.metrics_enabled = true;
  config.metric_export_interval_ms = INT64_MAX;
  config.span_batch.export_timeout_ms = INT64_MAX;
  config.span_batch.schedule_delay_ms = 0;
  config.log_batch.schedule_delay_ms = 0;
  testing::Capture c(config);
  { LENS_SPAN(mg::job, "kept"); }
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(milliseconds(500));  // idle: the export thread must sleep
  getrusage(RUSAGE_SELF, &after);
  auto cpu_us = [](const rusage& r) {
    return r.ru_utime.tv_sec * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1000000L + r.ru_stime.tv_usec;
  };
  EXPECT_LT(cpu_us(after) - cpu_us(before), 250000) << "the idle export thread spun";
  {
    std::lock_guard lock(c.exporter().mutex);
    EXPECT_LE(c.exporter().metrics.size(), 1u) << "metrics exported in a loop";
  }
  ASSERT_TRUE(c.telemetry().shutdown());
  EXPECT_EQ(c.telemetry().span_stats().exported, 1u);  // not dropped for an overflowed deadline
}

TEST(Pipeline, AFailingExporterCountsEverySpanOfItsBatches) {
  testing::Capture c(testing::capture_config("job"));
  c.exporter().fail = true;
  for (int i = 0; i < 100; ++i) {
    LENS_SPAN(mg::job, "doomed");
  }
  ASSERT_TRUE(c.telemetry().shutdown());
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, 100u);
  EXPECT_EQ(s.dropped_export_failed, 100u);
  EXPECT_GE(s.export_failures, 1u);
  EXPECT_EQ(s.exported, 0u);
}

TEST(Pipeline, AHangingExporterCannotHoldShutdownPastItsDeadline) {
  testing::Capture c(testing::capture_config("job"));
  c.exporter().hang = true;
  { LENS_SPAN(mg::job, "stuck"); }
  auto start = steady_clock::now();
  EXPECT_FALSE(c.telemetry().force_flush(milliseconds(100)));
  EXPECT_FALSE(c.telemetry().shutdown(milliseconds(200)));
  auto took = steady_clock::now() - start;
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_TRUE(c.telemetry().shutdown(milliseconds(10)));  // idempotent: the second call has nothing to do
  // Spans after shutdown are not recorded and the training thread never blocks.
  auto t0 = steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    LENS_SPAN(mg::job, "after");
  }
  EXPECT_LT(steady_clock::now() - t0, milliseconds(500));
  // The batch the exporter was still sending is counted, as failed, the moment shutdown gives up on it ...
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped() + s.queued, s.produced);
  c.exporter().release();  // let the stuck thread finish before the process ends
  std::this_thread::sleep_for(milliseconds(100));
  // ... and only once, when the exporter answers after all.
  s = c.telemetry().span_stats();
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.exported + s.dropped() + s.queued, s.produced);
}

// A Collector that stays away past shutdown's deadline: the batch being sent and every span still
// queued behind it are counted as failed when shutdown gives up, so produced = exported + dropped with nothing
// left "queued"; the export thread, freed later, sends and counts nothing more.
TEST(Pipeline, SpansStillQueuedWhenShutdownGivesUpAreCountedAsFailed) {
  Config config = testing::capture_config("job");
  config.span_batch.max_export_batch_size = 1;  // one span a batch: the rest wait behind the stuck one
  testing::Capture c(config);
  c.exporter().hang = true;
  for (int i = 0; i < 20; ++i) {
    LENS_SPAN(mg::job, "waiting");
  }
  EXPECT_FALSE(c.telemetry().force_flush(milliseconds(100)));
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(c.telemetry().shutdown(milliseconds(200)));
  const std::string said = ::testing::internal::GetCapturedStderr();
  // The totals line a finished shutdown prints, printed when it gives up too (it was missing).
  EXPECT_NE(said.find("lens: spans: 20 produced, 0 exported, 20 dropped"), std::string::npos) << said;
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, 20u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.dropped_export_failed, 20u);
  c.exporter().release();
  std::this_thread::sleep_for(milliseconds(200));
  const SpanStats later = c.telemetry().span_stats();
  EXPECT_EQ(later.exported, 0u) << "nothing is sent after shutdown gave up";
  EXPECT_EQ(later.dropped_export_failed, 20u);
  EXPECT_EQ(later.queued, 0u);
  EXPECT_LE(c.exporter().spans, 1u) << "only the batch that was already being sent reached the exporter";
}

// OTEL_BLRP_EXPORT_TIMEOUT and OTEL_METRIC_EXPORT_TIMEOUT are used: each signal's export gets its own deadline, not
// the spans'.
TEST(Pipeline, EachSignalExportsWithinItsOwnTimeout) {
  Config config = testing::capture_config("job");
  config.logs_enabled = true;
  config.span_batch.export_timeout_ms = 30000;
  config.log_batch.export_timeout_ms = 7000;
  config.metric_export_timeout_ms = 3000;
  testing::Capture c(config);
  { LENS_SPAN(mg::job, "one"); }
  log(Severity::kWarn, "one record");
  ASSERT_TRUE(c.telemetry().force_flush());
  const auto& shared = c.exporter();
  auto within = [](std::chrono::milliseconds budget, int ms) {
    return budget.count() > ms - 1000 && budget.count() <= ms;
  };
  EXPECT_TRUE(within(shared.span_budget, 30000)) << shared.span_budget.count();
  EXPECT_TRUE(within(shared.log_budget, 7000)) << shared.log_budget.count();
  EXPECT_TRUE(within(shared.metric_budget, 3000)) << shared.metric_budget.count();
}

TEST(Pipeline, ForceFlushExportsEverythingEndedBefore) {
  testing::Capture c(testing::capture_config("job"));
  for (int i = 0; i < 10; ++i) {
    LENS_SPAN(mg::job, "flushed");
  }
  ASSERT_TRUE(c.telemetry().force_flush());
  EXPECT_EQ(c.exporter().spans, 10u);
}

TEST(Pipeline, ManyProducersNothingLostUncounted) {
  Config config = testing::capture_config("job,step");
  config.span_batch.max_queue_size = 256;
  testing::Capture c(config);
  constexpr int kThreads = 4, kSpans = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kSpans; ++i) {
        LENS_SPAN(mg::job, "outer");
        LENS_SPAN(mg::step, "inner", {"i", i});
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(c.telemetry().shutdown());
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, static_cast<std::uint64_t>(2 * kThreads * kSpans));
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
  EXPECT_EQ(s.exported, c.exporter().spans);
}

TEST(Pipeline, SwitchingGroupsWhileThreadsRecord) {
  testing::Capture c(testing::capture_config("job"));
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    while (!stop.load()) {
      LENS_SPAN(mg::layer, "maybe");
    }
  });
  for (int i = 0; i < 200; ++i) set_enabled_span_groups(i % 2 ? GroupSet{mg::layer} : GroupSet{});
  stop.store(true);
  producer.join();
  ASSERT_TRUE(c.telemetry().shutdown());
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(Pipeline, MetricsAndLogsFromManyThreadsWhileExporting) {
  Config config = testing::capture_config("job");
  config.logs_enabled = true;
  config.log_batch.max_queue_size = 512;
  config.log_batch.max_export_batch_size = 64;
  config.metric_export_interval_ms = 5;
  testing::Capture c(config);
  auto counter = metrics::counter<std::int64_t>("concurrency.counter");
  auto histogram = metrics::histogram<double>("concurrency.histogram");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        counter.add(1);
        counter.add(1, {{"thread", t}});
        histogram.record(i);
        if (i % 4 == 0) log(Severity::kInfo, "tick", {{"i", i}});
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(c.telemetry().shutdown());
  LogStats logs = c.telemetry().log_stats();
  EXPECT_EQ(logs.produced, 4u * 500u);
  EXPECT_EQ(logs.exported + logs.dropped(), logs.produced);
  std::lock_guard lock(c.exporter().mutex);
  ASSERT_FALSE(c.exporter().metrics.empty());
  testing::json last = testing::json::parse(c.exporter().metrics.back());
  std::int64_t total = 0;
  for (const auto& m : last["resourceMetrics"][0]["scopeMetrics"][0]["metrics"])
    if (m["name"] == "concurrency.counter")
      for (const auto& p : m["sum"]["dataPoints"]) total += std::stoll(p["asInt"].get<std::string>());
  EXPECT_EQ(total, 2 * 4 * 2000);  // cumulative: every add counted once
}

}  // namespace
}  // namespace lens
