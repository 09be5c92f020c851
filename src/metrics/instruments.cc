#include "metrics/instruments.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "common/clock.h"

namespace lens::internal {

std::atomic<bool> g_metrics_recording{false};

namespace {

std::atomic<CollectHook> g_collect_hook{nullptr};

struct Registry {
  std::mutex mutex;  // guards instruments
  std::map<std::string, std::unique_ptr<Instrument>, std::less<>> instruments;
};
Registry& registry() {
  static auto* r = new Registry;  // leaked: instruments are used from any thread until the process ends
  return *r;
}

void update_min_max(Series& s, double v, bool first) noexcept {
  if (first) {
    s.min.store(v, std::memory_order_relaxed);
    s.max.store(v, std::memory_order_relaxed);
    return;
  }
  double m = s.min.load(std::memory_order_relaxed);
  while (v < m && !s.min.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
  }
  m = s.max.load(std::memory_order_relaxed);
  while (v > m && !s.max.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
  }
}

void record_histogram(Instrument& i, Series& s, double v) noexcept {
  if (std::isnan(v)) return;
  // Bucket k holds (bounds[k-1], bounds[k]]: the first bound >= v.
  std::size_t k = static_cast<std::size_t>(std::lower_bound(i.bounds.begin(), i.bounds.end(), v) - i.bounds.begin());
  s.bucket_counts[k].fetch_add(1, std::memory_order_relaxed);
  s.double_value.fetch_add(v, std::memory_order_relaxed);  // the sum
  bool first = s.count.fetch_add(1, std::memory_order_relaxed) == 0;
  update_min_max(s, v, first);
}

// A sum that was measured is exported even while it is 0 (a dashboard shows 0, not "No data"). A load first:
// the flag is written once per series, not on every measurement.
void mark_measured(Series& s) noexcept {
  if (!s.has_value.load(std::memory_order_relaxed)) s.has_value.store(true, std::memory_order_release);
}

void record_into(Instrument& i, Series& s, double v, std::int64_t iv) noexcept {
  switch (i.kind) {
    case InstrumentKind::kCounter:
    case InstrumentKind::kUpDownCounter:
      if (i.integer)
        s.int_value.fetch_add(iv, std::memory_order_relaxed);
      else
        s.double_value.fetch_add(v, std::memory_order_relaxed);
      mark_measured(s);
      break;
    case InstrumentKind::kGauge:
      if (i.integer)
        s.int_value.store(iv, std::memory_order_relaxed);
      else
        s.double_value.store(v, std::memory_order_relaxed);
      s.has_value.store(true, std::memory_order_release);
      break;
    case InstrumentKind::kHistogram: record_histogram(i, s, i.integer ? static_cast<double>(iv) : v); break;
  }
}

// Owned, sorted attributes and their key text (scalars only; arrays are not metric attributes here).
std::pair<std::string, MetricAttributes> own(std::span<const Attribute> attributes) {
  MetricAttributes out;
  for (const Attribute& a : attributes) {
    std::string key(a.key.text());
    switch (a.value.type()) {
      case ValueType::kBool: out.emplace_back(key, a.value.as_bool()); break;
      case ValueType::kInt: out.emplace_back(key, a.value.as_int()); break;
      case ValueType::kDouble: out.emplace_back(key, a.value.as_double()); break;
      case ValueType::kString: out.emplace_back(key, std::string(a.value.as_string())); break;
      default: break;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string text;
  for (const auto& [k, v] : out) {
    text += k;
    text += '\x1f';
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
            text += x;
          else
            text += std::to_string(x);
        },
        v);
    text += '\x1e';
  }
  return {std::move(text), std::move(out)};
}

Series& series_for(Instrument& i, std::span<const Attribute> attributes) {
  auto [key, owned] = own(attributes);
  std::lock_guard lock(i.mutex);
  auto it = i.attributed.find(key);
  if (it != i.attributed.end()) return *it->second.second;
  if (i.attributed.size() >= Instrument::kMaxSeries) {
    i.overflowed.fetch_add(1, std::memory_order_relaxed);
    if (!i.overflow) i.overflow = std::make_unique<Series>(i.bounds.size() + 1);
    return *i.overflow;
  }
  auto series = std::make_unique<Series>(i.bounds.size() + 1);
  Series& s = *series;
  i.attributed.emplace(std::move(key), std::make_pair(std::move(owned), std::move(series)));
  return s;
}

MetricPoint snapshot(const Instrument& i, const Series& s) {
  MetricPoint p;
  p.int_value = s.int_value.load(std::memory_order_relaxed);
  p.double_value = s.double_value.load(std::memory_order_relaxed);
  if (i.kind == InstrumentKind::kHistogram) {
    for (const auto& c : s.bucket_counts) p.bucket_counts.push_back(c.load(std::memory_order_relaxed));
    p.count = s.count.load(std::memory_order_relaxed);
    p.sum = p.double_value;
    p.min = s.min.load(std::memory_order_relaxed);
    p.max = s.max.load(std::memory_order_relaxed);
  }
  return p;
}

// Has this series seen any measurement (so an untouched instrument exports nothing)?
bool has_data(const Instrument& i, const Series& s) {
  switch (i.kind) {
    case InstrumentKind::kGauge: return s.has_value.load(std::memory_order_acquire);
    case InstrumentKind::kHistogram: return s.count.load(std::memory_order_relaxed) > 0;
    default: return s.has_value.load(std::memory_order_acquire);
  }
}

}  // namespace

void set_metrics_recording(bool on) noexcept { g_metrics_recording.store(on, std::memory_order_relaxed); }

void set_collect_hook(CollectHook hook) noexcept { g_collect_hook.store(hook, std::memory_order_release); }

Instrument* find_or_create_instrument(std::string_view name, std::string_view unit, std::string_view description,
                                      InstrumentKind kind, bool integer, std::span<const double> bounds) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.instruments.find(name);
  if (it != r.instruments.end()) {
    if (it->second->kind != kind || it->second->integer != integer)
      throw std::invalid_argument("lens: instrument '" + std::string(name) +
                                  "' already exists with another kind or value type");
    return it->second.get();
  }
  std::vector<double> sorted(bounds.begin(), bounds.end());
  if (!std::is_sorted(sorted.begin(), sorted.end()) || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("lens: histogram bounds of '" + std::string(name) + "' must increase strictly");
  auto instrument = std::make_unique<Instrument>(std::string(name), std::string(unit), std::string(description), kind,
                                                 integer, std::move(sorted));
  Instrument* raw = instrument.get();
  r.instruments.emplace(std::string(name), std::move(instrument));
  return raw;
}

void add(Instrument* i, std::int64_t v) noexcept {
  i->plain.int_value.fetch_add(v, std::memory_order_relaxed);
  mark_measured(i->plain);
}
void add(Instrument* i, double v) noexcept {
  i->plain.double_value.fetch_add(v, std::memory_order_relaxed);
  mark_measured(i->plain);
}
void record(Instrument* i, std::int64_t v) noexcept { record_into(*i, i->plain, static_cast<double>(v), v); }
void record(Instrument* i, double v) noexcept { record_into(*i, i->plain, v, static_cast<std::int64_t>(v)); }

void add(Instrument* i, double v, std::int64_t iv, std::span<const Attribute> attributes) noexcept {
  try {
    record_into(*i, series_for(*i, attributes), v, iv);
  } catch (...) {
    i->overflowed.fetch_add(1, std::memory_order_relaxed);  // no memory for a new series: counted, not thrown
  }
}
void record(Instrument* i, double v, std::int64_t iv, std::span<const Attribute> attributes) noexcept {
  add(i, v, iv, attributes);
}

MetricCollector::MetricCollector(Temporality temporality)
    : temporality_(temporality), start_unix_nanos_(unix_nanos_now()), last_unix_nanos_(start_unix_nanos_) {}

std::vector<MetricData> MetricCollector::collect() {
  if (CollectHook hook = g_collect_hook.load(std::memory_order_acquire)) hook();  // values taken at collection
  std::uint64_t now = unix_nanos_now();
  std::vector<MetricData> out;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& [name, instrument] : r.instruments) {
    Instrument& i = *instrument;
    bool monotonic_sum = i.kind == InstrumentKind::kCounter || i.kind == InstrumentKind::kHistogram;
    // Delta for counters and histograms when asked (lowmemory too); up-down counters stay cumulative, as the
    // specification's preference table says; gauges are last values either way.
    bool delta = monotonic_sum && temporality_ != Temporality::kCumulative;
    MetricData d{i.name,   i.unit, i.description, i.kind, i.integer, i.kind == InstrumentKind::kCounter, delta,
                 i.bounds, {}};
    auto emit = [&](const std::string& key, MetricAttributes attributes, const Series& s) {
      if (!has_data(i, s)) return;
      MetricPoint p = snapshot(i, s);
      p.attributes = std::move(attributes);
      p.time_unix_nanos = now;
      p.start_unix_nanos = delta ? last_unix_nanos_ : start_unix_nanos_;
      if (delta) {
        MetricPoint cumulative = p;
        auto prev = previous_.find(i.name + '\x1d' + key);
        if (prev != previous_.end()) {
          const MetricPoint& q = prev->second;
          p.int_value -= q.int_value;
          p.double_value -= q.double_value;
          p.sum -= q.sum;
          p.count -= q.count;
          for (std::size_t b = 0; b < p.bucket_counts.size() && b < q.bucket_counts.size(); ++b)
            p.bucket_counts[b] -= q.bucket_counts[b];
        }
        previous_[i.name + '\x1d' + key] = std::move(cumulative);
      }
      d.points.push_back(std::move(p));
    };
    emit("", {}, i.plain);
    {
      std::lock_guard series_lock(i.mutex);
      for (auto& [key, entry] : i.attributed) emit(key, entry.first, *entry.second);
      if (i.overflow) emit("\x1foverflow", {{"otel.metric.overflow", true}}, *i.overflow);
    }
    if (!d.points.empty()) out.push_back(std::move(d));
  }
  last_unix_nanos_ = now;
  return out;
}

}  // namespace lens::internal
