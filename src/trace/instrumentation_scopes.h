// The instrumentation scopes spans are recorded under (OpenTelemetry's tracer name and version): a process-wide
// table, append-only, that a span's record names by index (RecordHeader::scope) and the exporters read back.
// Index 0 is lens's own scope, `lens` at lens's version, which every span started with no scope keeps.
//
//   const lens::InstrumentationScope scope = lens::instrumentation_scope("megatron.training", "0.14");
//   lens::Span span(group, "megatron.train_step", {}, {.scope = scope});
//   ... internal::scope_name(span's record header.scope) == "megatron.training"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lens/span.h"

namespace lens::internal {

// Scopes past this many distinct (name, version) pairs are recorded as lens's own, with one warning.
inline constexpr std::size_t kMaxInstrumentationScopes = InstrumentationScope::kMax;

struct ScopeNames {
  std::string_view name;
  std::string_view version;  // empty: none given
};
// The scope of index `id` (one returned by lens::instrumentation_scope; an unknown one reads as lens's own). Safe
// from any thread: an entry, once published, never changes or moves.
ScopeNames scope_names(std::uint16_t id) noexcept;

}  // namespace lens::internal
