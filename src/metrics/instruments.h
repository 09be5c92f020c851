// Instruments, their series and the collection of a snapshot (CONTRACT §8).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lens/config.h"
#include "lens/metrics.h"
#include "lens/telemetry.h"
#include "signals/metric_data.h"

namespace lens::internal {

// One time series: cumulative state, updated with relaxed atomics.
struct Series {
  explicit Series(std::size_t buckets) : bucket_counts(buckets) {}
  std::atomic<std::int64_t> int_value{0};
  std::atomic<double> double_value{0};
  std::atomic<bool> has_value{false};                     // a measurement was taken (a sum of 0 is data)
  std::vector<std::atomic<std::uint64_t>> bucket_counts;  // histograms: one more than the bounds
  std::atomic<std::uint64_t> count{0};
  std::atomic<double> min{0}, max{0};
};

struct Instrument {
  static constexpr std::size_t kMaxSeries = 2000;  // the specification's default cardinality limit

  std::string name, unit, description;
  InstrumentKind kind;
  bool integer;
  std::vector<double> bounds;
  Series plain;  // no attributes

  std::mutex mutex;  // guards `attributed` (measurements with attributes only)
  std::map<std::string, std::pair<MetricAttributes, std::unique_ptr<Series>>> attributed;
  std::unique_ptr<Series> overflow;
  std::atomic<std::uint64_t> overflowed{0};  // measurements sent to the overflow series

  Instrument(std::string n, std::string u, std::string d, InstrumentKind k, bool i, std::vector<double> b)
      : name(std::move(n)),
        unit(std::move(u)),
        description(std::move(d)),
        kind(k),
        integer(i),
        bounds(std::move(b)),
        plain(bounds.size() + 1) {}
};

// Collects every instrument that has data, with the temporality asked for. Keeps what delta needs (the
// previous cumulative values) between calls; one collector per reader.
class MetricCollector {
 public:
  explicit MetricCollector(Temporality temporality);
  std::vector<MetricData> collect();

 private:
  Temporality temporality_;
  std::uint64_t start_unix_nanos_;
  std::uint64_t last_unix_nanos_;
  std::map<std::string, MetricPoint> previous_;  // delta: the last cumulative point of each series
};

// Turns recording on or off for every instrument (setup on an exporting rank with metrics on).
void set_metrics_recording(bool on) noexcept;

// Called at the start of every collection, before the instruments are read: it records values that are only true
// at that moment (the progress heartbeat, src/watch/progress.h). Set by a higher layer; nullptr: none.
using CollectHook = void (*)() noexcept;
void set_collect_hook(CollectHook hook) noexcept;

}  // namespace lens::internal
