// Instruments, aggregation and temporality, as a collector sees them.
#include "lens/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "metrics/instruments.h"
#include "support/alloc_counter.h"

namespace lens {
namespace {

using internal::MetricCollector;
using internal::MetricData;

// Recording is on only while a test says so (an exporting rank with metrics on, in real use).
class Metrics : public ::testing::Test {
 protected:
  void SetUp() override { internal::set_metrics_recording(true); }
  void TearDown() override { internal::set_metrics_recording(false); }
};

const MetricData* find(const std::vector<MetricData>& all, const std::string& name) {
  for (const MetricData& m : all)
    if (m.name == name) return &m;
  return nullptr;
}

TEST_F(Metrics, CounterUpDownCounterAndGaugeValues) {
  auto c = metrics::counter<std::int64_t>("test.counter", {.description = "Items.", .unit = "{item}"});
  auto d = metrics::counter<double>("test.counter.double");
  auto u = metrics::up_down_counter<std::int64_t>("test.updown");
  auto g = metrics::gauge<double>("test.gauge", {.unit = "1"});
  MetricCollector collector(Temporality::kCumulative);
  c.add(3);
  c.add(4);
  c.add(-5);  // ignored: counters only go up
  d.add(0.5);
  u.add(10);
  u.add(-4);
  g.record(1.5);
  g.record(0.25);  // last value wins
  std::vector<MetricData> all = collector.collect();
  ASSERT_NE(find(all, "test.counter"), nullptr);
  EXPECT_EQ(find(all, "test.counter")->points.at(0).int_value, 7);
  EXPECT_EQ(find(all, "test.counter")->unit, "{item}");
  EXPECT_EQ(find(all, "test.counter")->description, "Items.");
  EXPECT_TRUE(find(all, "test.counter")->monotonic);
  EXPECT_DOUBLE_EQ(find(all, "test.counter.double")->points.at(0).double_value, 0.5);
  EXPECT_EQ(find(all, "test.updown")->points.at(0).int_value, 6);
  EXPECT_FALSE(find(all, "test.updown")->monotonic);
  EXPECT_DOUBLE_EQ(find(all, "test.gauge")->points.at(0).double_value, 0.25);
}

// A counter added 0 (megatron.training.skipped_iters in a healthy run) is exported at 0, so a dashboard shows 0, not
// "No data".
TEST_F(Metrics, ACounterThatWasAddedZeroIsExportedAtZeroAndAnUntouchedOneIsNot) {
  auto untouched = metrics::counter<std::int64_t>("test.zero.untouched");
  auto zero = metrics::counter<std::int64_t>("test.zero.plain");
  auto zero_attributed = metrics::counter<double>("test.zero.attributed");
  auto down = metrics::up_down_counter<std::int64_t>("test.zero.updown");
  MetricCollector collector(Temporality::kCumulative);
  zero.add(0);
  zero_attributed.add(0.0, {{"reason", "none"}});
  down.add(2);
  down.add(-2);
  std::vector<MetricData> all = collector.collect();
  EXPECT_EQ(find(all, "test.zero.untouched"), nullptr);
  ASSERT_NE(find(all, "test.zero.plain"), nullptr);
  EXPECT_EQ(find(all, "test.zero.plain")->points.at(0).int_value, 0);
  ASSERT_NE(find(all, "test.zero.attributed"), nullptr);
  EXPECT_EQ(find(all, "test.zero.attributed")->points.at(0).double_value, 0.0);
  ASSERT_NE(find(all, "test.zero.updown"), nullptr) << "back at 0 is still a value";
  EXPECT_EQ(find(all, "test.zero.updown")->points.at(0).int_value, 0);
  (void)untouched;
}

TEST_F(Metrics, HistogramBucketsSumMinMax) {
  const double bounds[] = {1, 10, 100};
  auto h = metrics::histogram<double>("test.histogram", {.unit = "ms", .bounds = bounds});
  MetricCollector collector(Temporality::kCumulative);
  for (double v : {0.5, 1.0, 5.0, 10.0, 50.0, 1000.0}) h.record(v);
  h.record(std::nan(""));  // not a measurement
  std::vector<MetricData> all = collector.collect();
  const MetricData* m = find(all, "test.histogram");
  ASSERT_NE(m, nullptr);
  const auto& p = m->points.at(0);
  // Buckets are (-inf,1], (1,10], (10,100], (100,+inf).
  EXPECT_EQ(p.bucket_counts, (std::vector<std::uint64_t>{2, 2, 1, 1}));
  EXPECT_EQ(p.count, 6u);
  EXPECT_DOUBLE_EQ(p.sum, 1066.5);
  EXPECT_DOUBLE_EQ(p.min, 0.5);
  EXPECT_DOUBLE_EQ(p.max, 1000.0);
  EXPECT_EQ(m->bounds, (std::vector<double>{1, 10, 100}));
}

TEST_F(Metrics, DefaultHistogramBoundsAreTheSpecifications) {
  auto h = metrics::histogram<std::int64_t>("test.histogram.default");
  h.record(7);
  std::vector<MetricData> all = MetricCollector(Temporality::kCumulative).collect();
  const MetricData* m = find(all, "test.histogram.default");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bounds, (std::vector<double>{0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000}));
  EXPECT_EQ(m->points.at(0).bucket_counts.size(), 16u);
}

TEST_F(Metrics, DeltaTemporalityReportsTheChangeSinceTheLastCollection) {
  auto c = metrics::counter<std::int64_t>("test.delta.counter");
  auto h = metrics::histogram<double>("test.delta.histogram");
  auto g = metrics::gauge<std::int64_t>("test.delta.gauge");
  MetricCollector delta(Temporality::kDelta);
  MetricCollector cumulative(Temporality::kCumulative);
  c.add(5);
  h.record(3);
  g.record(9);
  std::vector<MetricData> first = delta.collect();
  c.add(2);
  h.record(4);
  std::vector<MetricData> second = delta.collect();
  EXPECT_EQ(find(first, "test.delta.counter")->points.at(0).int_value, 5);
  EXPECT_EQ(find(second, "test.delta.counter")->points.at(0).int_value, 2);
  EXPECT_TRUE(find(second, "test.delta.counter")->delta);
  EXPECT_EQ(find(second, "test.delta.histogram")->points.at(0).count, 1u);
  EXPECT_DOUBLE_EQ(find(second, "test.delta.histogram")->points.at(0).sum, 4.0);
  EXPECT_EQ(find(second, "test.delta.gauge")->points.at(0).int_value, 9);  // gauges: the last value
  EXPECT_GE(find(second, "test.delta.counter")->points.at(0).start_unix_nanos,
            find(first, "test.delta.counter")->points.at(0).time_unix_nanos);
  std::vector<MetricData> all = cumulative.collect();
  EXPECT_EQ(find(all, "test.delta.counter")->points.at(0).int_value, 7);
  EXPECT_FALSE(find(all, "test.delta.counter")->delta);
}

TEST_F(Metrics, AttributesMakeSeriesAndCardinalityOverflowIsCounted) {
  auto c = metrics::counter<std::int64_t>("test.attributed");
  for (int i = 0; i < 2100; ++i) c.add(1, {{"worker", i}});
  c.add(1, {{"worker", 0}});
  c.add(5);
  std::vector<MetricData> all = MetricCollector(Temporality::kCumulative).collect();
  const MetricData* m = find(all, "test.attributed");
  ASSERT_NE(m, nullptr);
  std::int64_t total = 0;
  std::size_t overflow_points = 0;
  for (const auto& p : m->points) {
    total += p.int_value;
    for (const auto& [k, v] : p.attributes) overflow_points += k == "otel.metric.overflow";
  }
  EXPECT_EQ(total, 2100 + 1 + 5);  // nothing lost: the overflow series holds the rest
  EXPECT_EQ(overflow_points, 1u);
  EXPECT_EQ(m->points.size(), 2000u + 2u);  // 2000 series, the plain one, the overflow one
}

TEST_F(Metrics, SameNameSameInstrumentOtherKindIsAnError) {
  auto a = metrics::counter<std::int64_t>("test.same");
  auto b = metrics::counter<std::int64_t>("test.same");
  a.add(1);
  b.add(1);
  std::vector<MetricData> all = MetricCollector(Temporality::kCumulative).collect();
  EXPECT_EQ(find(all, "test.same")->points.at(0).int_value, 2);
  EXPECT_THROW(metrics::gauge<std::int64_t>("test.same"), std::invalid_argument);
  EXPECT_THROW(metrics::counter<double>("test.same"), std::invalid_argument);
  const double unsorted[] = {5, 1};
  EXPECT_THROW(metrics::histogram<double>("test.bad.bounds", {.bounds = unsorted}), std::invalid_argument);
}

TEST_F(Metrics, NothingIsRecordedWhenRecordingIsOff) {
  auto c = metrics::counter<std::int64_t>("test.off");
  internal::set_metrics_recording(false);
  c.add(10);
  std::vector<MetricData> all = MetricCollector(Temporality::kCumulative).collect();
  EXPECT_EQ(find(all, "test.off"), nullptr);
}

TEST_F(Metrics, RecordingWithoutAttributesAllocatesNothing) {
  auto c = metrics::counter<std::int64_t>("test.noalloc.counter");
  auto h = metrics::histogram<double>("test.noalloc.histogram");
  auto g = metrics::gauge<double>("test.noalloc.gauge");
  long before = lens::testing::allocation_count();
  for (int i = 0; i < 1000; ++i) {
    c.add(1);
    h.record(i * 0.5);
    g.record(i);
  }
  EXPECT_EQ(lens::testing::allocation_count() - before, 0);
}

}  // namespace
}  // namespace lens
