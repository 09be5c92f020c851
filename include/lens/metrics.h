// lens/metrics.h: counters, up-down counters, histograms and gauges (CONTRACT §8).
//
// An instrument is created once by name (the same name gives the same instrument) and recorded into from any
// thread. A measurement without attributes is a few relaxed atomic operations: no lock, no allocation. With
// attributes, each distinct set is its own series, up to 2000 per instrument; beyond that measurements go to
// one overflow series (`otel.metric.overflow=true`) and are counted. Measurements are recorded only on an
// exporting rank with metrics on; elsewhere a record is one relaxed load.
//
//   static auto steps = lens::metrics::counter<std::int64_t>("trainer.steps", {.description = "Steps run."});
//   static auto step_ms =
//       lens::metrics::histogram<double>("trainer.step_duration", {.description = "Step time.", .unit = "ms"});
//   steps.add(1);
//   step_ms.record(412.5, {{"phase", "train"}});
//
// Values are collected every OTEL_METRIC_EXPORT_INTERVAL ms (lens default 10000) and at flush and shutdown,
// with cumulative (default) or delta temporality (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE), and
// exported like spans (rank<R>.metrics.jsonl with the file exporter), or served to Prometheus
// (OTEL_METRICS_EXPORTER=prometheus).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "lens/attributes.h"
#include "lens/internal/visibility.h"

namespace lens {

enum class InstrumentKind : std::uint8_t { kCounter, kUpDownCounter, kHistogram, kGauge };

namespace internal {

struct Instrument;  // src/metrics

#if !defined(LENS_DISABLED)
extern LENS_API std::atomic<bool> g_metrics_recording;

LENS_API Instrument* find_or_create_instrument(std::string_view name, std::string_view unit,
                                               std::string_view description, InstrumentKind kind, bool integer,
                                               std::span<const double> bounds);
// No attributes: lock-free.
LENS_API void add(Instrument* i, std::int64_t v) noexcept;
LENS_API void add(Instrument* i, double v) noexcept;
LENS_API void record(Instrument* i, std::int64_t v) noexcept;
LENS_API void record(Instrument* i, double v) noexcept;
// With attributes: finds the series under a lock.
LENS_API void add(Instrument* i, double v, std::int64_t iv, std::span<const Attribute> attributes) noexcept;
LENS_API void record(Instrument* i, double v, std::int64_t iv, std::span<const Attribute> attributes) noexcept;

inline bool recording() noexcept { return g_metrics_recording.load(std::memory_order_relaxed); }
#else  // LENS_DISABLED: instruments exist as names only; nothing is recorded.
inline Instrument* find_or_create_instrument(std::string_view, std::string_view, std::string_view, InstrumentKind, bool,
                                             std::span<const double>) {
  return nullptr;
}
template <typename... A>
inline void add(A&&...) noexcept {}
template <typename... A>
inline void record(A&&...) noexcept {}
constexpr bool recording() noexcept { return false; }
#endif

}  // namespace internal

namespace metrics {

// The default histogram bounds of the OpenTelemetry specification.
inline constexpr double kDefaultBounds[] = {0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000};

// Counters and up-down counters share the shape: add a value; a counter ignores negative increments.
template <typename T, bool kMonotonic>
class Sum {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>, "int64_t or double");

 public:
  explicit Sum(internal::Instrument* i) noexcept : i_(i) {}
  void add(T v) noexcept {
    if (internal::recording() && (!kMonotonic || v >= 0)) internal::add(i_, v);
  }
  void add(T v, std::initializer_list<Attribute> attributes) noexcept {
    if (internal::recording() && (!kMonotonic || v >= 0))
      internal::add(i_, static_cast<double>(v), static_cast<std::int64_t>(v), internal::as_span(attributes));
  }

 private:
  internal::Instrument* i_;
};
template <typename T>
using Counter = Sum<T, true>;
template <typename T>
using UpDownCounter = Sum<T, false>;

// Histograms and gauges share the shape: record a value.
template <typename T>
class Recorder {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>, "int64_t or double");

 public:
  explicit Recorder(internal::Instrument* i) noexcept : i_(i) {}
  void record(T v) noexcept {
    if (internal::recording()) internal::record(i_, v);
  }
  void record(T v, std::initializer_list<Attribute> attributes) noexcept {
    if (internal::recording())
      internal::record(i_, static_cast<double>(v), static_cast<std::int64_t>(v), internal::as_span(attributes));
  }

 private:
  internal::Instrument* i_;
};
template <typename T>
using Histogram = Recorder<T>;
template <typename T>
using Gauge = Recorder<T>;

// What describes an instrument, in OpenTelemetry's order, named at the call so that the two strings cannot be
// swapped unseen: lens::metrics::counter<std::int64_t>("trainer.steps", {.description = "Steps run."}).
struct InstrumentOptions {
  std::string_view description = {};
  std::string_view unit = {};                       // UCUM: "ms", "By", "{item}"; empty for a plain number
  std::span<const double> bounds = kDefaultBounds;  // histograms only: ascending bucket bounds
};

// Creating an instrument that exists returns it; the same name with another kind or value type throws
// std::invalid_argument.
template <typename T>
Counter<T> counter(std::string_view name, const InstrumentOptions& o = {}) {
  return Counter<T>(internal::find_or_create_instrument(name, o.unit, o.description, InstrumentKind::kCounter,
                                                        std::is_integral_v<T>, {}));
}
template <typename T>
UpDownCounter<T> up_down_counter(std::string_view name, const InstrumentOptions& o = {}) {
  return UpDownCounter<T>(internal::find_or_create_instrument(
      name, o.unit, o.description, InstrumentKind::kUpDownCounter, std::is_integral_v<T>, {}));
}
template <typename T>
Histogram<T> histogram(std::string_view name, const InstrumentOptions& o = {}) {
  return Histogram<T>(internal::find_or_create_instrument(name, o.unit, o.description, InstrumentKind::kHistogram,
                                                          std::is_integral_v<T>, o.bounds));
}
template <typename T>
Gauge<T> gauge(std::string_view name, const InstrumentOptions& o = {}) {
  return Gauge<T>(internal::find_or_create_instrument(name, o.unit, o.description, InstrumentKind::kGauge,
                                                      std::is_integral_v<T>, {}));
}

}  // namespace metrics

}  // namespace lens
