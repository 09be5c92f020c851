// lens/context.h: trace and span identity, the part of a span that crosses threads and processes.
//
// A SpanContext is what a sampler sees of a parent and what W3C `traceparent` carries: a 16-byte trace id, an
// 8-byte span id and the trace flags (bit 0: sampled). Ids are big-endian byte arrays, as on the wire.
//
//   lens::SpanContext parent = ...;
//   if (parent.is_valid() && parent.is_sampled()) { ... }
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace lens {

namespace internal {
// The W3C rule for both ids: all-zero is invalid.
template <std::size_t N>
constexpr bool any_nonzero(const std::array<std::uint8_t, N>& bytes) noexcept {
  for (std::uint8_t b : bytes)
    if (b != 0) return true;
  return false;
}
}  // namespace internal

struct TraceId {
  std::array<std::uint8_t, 16> bytes{};

  constexpr bool is_valid() const noexcept { return internal::any_nonzero(bytes); }
  // The low 64 bits (bytes 8..15, big-endian): what the trace-id ratio test compares (SPEC §4).
  constexpr std::uint64_t low64() const noexcept {
    std::uint64_t v = 0;
    for (int i = 8; i < 16; ++i) v = (v << 8) | bytes[i];
    return v;
  }
  friend constexpr bool operator==(const TraceId&, const TraceId&) = default;
};

struct SpanId {
  std::array<std::uint8_t, 8> bytes{};

  constexpr bool is_valid() const noexcept { return internal::any_nonzero(bytes); }
  friend constexpr bool operator==(const SpanId&, const SpanId&) = default;
};

struct SpanContext {
  static constexpr std::uint8_t kSampledFlag = 0x01;
  static constexpr std::uint8_t kRandomFlag = 0x02;  // W3C level 2: the trace id's low 56 bits are random

  TraceId trace_id;
  SpanId span_id;
  std::uint8_t trace_flags = 0;
  bool is_remote = false;  // came from another process (traceparent, the binary form)

  constexpr bool is_valid() const noexcept { return trace_id.is_valid() && span_id.is_valid(); }
  constexpr bool is_sampled() const noexcept { return (trace_flags & kSampledFlag) != 0; }
};

}  // namespace lens
