// A metric as collected for export: owned values, so a batch outlives the instruments' next updates.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lens/metrics.h"
#include "lens/telemetry.h"

namespace lens::internal {

using MetricAttributes = ResourceAttributes;  // owned key/value pairs, sorted by key

// A collected point.
struct MetricPoint {
  MetricAttributes attributes;
  std::int64_t int_value = 0;
  double double_value = 0;
  std::vector<std::uint64_t> bucket_counts;
  std::uint64_t count = 0;
  double sum = 0, min = 0, max = 0;
  std::uint64_t start_unix_nanos = 0, time_unix_nanos = 0;
};

// A point taken at `now_unix_nanos`, of a sum that started at `start_unix_nanos` (0 for a gauge, which has no start).
inline MetricPoint point_at(std::uint64_t start_unix_nanos, std::uint64_t now_unix_nanos,
                            MetricAttributes attributes = {}) {
  MetricPoint p;
  p.attributes = std::move(attributes);
  p.start_unix_nanos = start_unix_nanos;
  p.time_unix_nanos = now_unix_nanos;
  return p;
}

struct MetricData {
  std::string name, unit, description;
  InstrumentKind kind;
  bool integer;
  bool monotonic;
  bool delta = false;  // the points' temporality: delta, else cumulative
  std::vector<double> bounds;
  std::vector<MetricPoint> points;
};

}  // namespace lens::internal
