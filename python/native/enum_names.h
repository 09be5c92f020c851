// lens's enums as the environment spells them, for the fields of lens.Config and the calls that take one by name: a
// name for each value, and a value for a name (ValueError naming the field and the valid names).
//
//   c.device_timing = parse_enum(text, kDeviceTimings, "device_timing");
#pragma once

#include <pybind11/pybind11.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "lens/config.h"
#include "lens/log.h"
#include "lens/metrics.h"

namespace lens_python {

template <typename E>
using EnumNames = std::initializer_list<std::pair<E, const char*>>;

template <typename E>
std::string name_of(E value, EnumNames<E> names) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "unknown";
}

template <typename E>
E parse_enum(const std::string& text, EnumNames<E> names, const char* field) {
  std::string valid;
  for (const auto& [v, n] : names) {
    if (text == n) return v;
    valid += valid.empty() ? n : std::string(", ") + n;
  }
  throw pybind11::value_error(std::string("lens: ") + field + "='" + text + "' is invalid: expected one of " + valid);
}

inline const EnumNames<lens::Exporter> kExporters{
    {lens::Exporter::kOtlp, "otlp"}, {lens::Exporter::kConsole, "console"}, {lens::Exporter::kFile, "file"}};
inline const EnumNames<lens::TraceLayout> kLayouts{{lens::TraceLayout::kSegment, "segment"},
                                                   {lens::TraceLayout::kStep, "step"}};
inline const EnumNames<lens::DeviceTiming> kDeviceTimings{{lens::DeviceTiming::kNone, "none"},
                                                          {lens::DeviceTiming::kCuda, "cuda"}};
inline const EnumNames<lens::SpanNaming> kNamings{{lens::SpanNaming::kDocumented, "documented"},
                                                  {lens::SpanNaming::kMegatron, "megatron"}};
inline const EnumNames<lens::SignalExporter> kSignalExporters{{lens::SignalExporter::kFollow, ""},
                                                              {lens::SignalExporter::kOtlp, "otlp"},
                                                              {lens::SignalExporter::kConsole, "console"},
                                                              {lens::SignalExporter::kNone, "none"},
                                                              {lens::SignalExporter::kPrometheus, "prometheus"}};
inline const EnumNames<lens::Temporality> kTemporalities{{lens::Temporality::kCumulative, "cumulative"},
                                                         {lens::Temporality::kDelta, "delta"},
                                                         {lens::Temporality::kLowMemory, "lowmemory"}};
inline const EnumNames<lens::Severity> kSeverities{
    {lens::Severity::kTrace, "trace"}, {lens::Severity::kDebug, "debug"}, {lens::Severity::kInfo, "info"},
    {lens::Severity::kWarn, "warn"},   {lens::Severity::kError, "error"}, {lens::Severity::kFatal, "fatal"}};

}  // namespace lens_python
