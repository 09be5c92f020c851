// lens/context.h: trace and span identity, the part of a span that crosses threads and processes.
//
// A SpanContext is what a sampler sees of a parent and what W3C `traceparent` carries: a 16-byte trace id, an
// 8-byte span id and the trace flags (bit 0: sampled). Ids are big-endian byte arrays, as on the wire. To carry
// a context to another process: W3C Trace Context text (HTTP headers, environment variables) or a fixed-size
// binary form (a tensor broadcast through a collective).
//
//   std::string header = lens::to_traceparent(lens::current_context());
//   std::optional<lens::SpanContext> parent = lens::from_traceparent(header);   // is_remote() set
//   lens::BinaryContext bytes = lens::to_binary(ctx);                              // 26 bytes
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "lens/internal/visibility.h"

namespace lens {

namespace internal {
// The W3C rule for both ids: all-zero is invalid. At run time a word at a time: the byte loop cost a child span up to
// 24 compares and branches to find its parent valid.
template <std::size_t N>
constexpr bool any_nonzero(const std::array<std::uint8_t, N>& bytes) noexcept {
  if (!std::is_constant_evaluated()) {
    static_assert(N % 8 == 0);
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < N; i += 8) {
      std::uint64_t word;
      __builtin_memcpy(&word, bytes.data() + i, 8);
      any |= word;
    }
    return any != 0;
  }
  for (std::uint8_t b : bytes)
    if (b != 0) return true;
  return false;
}
}  // namespace internal

struct TraceId {
  std::array<std::uint8_t, 16> bytes{};

  constexpr bool is_valid() const noexcept { return internal::any_nonzero(bytes); }
  // The low 64 bits (bytes 8..15, big-endian): what the trace-id ratio test compares (CONTRACT §4).
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

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

// W3C Trace Context, `traceparent`: "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
LENS_API std::string to_traceparent(const SpanContext& context);
// Parses a traceparent as the W3C specification says: lower-case hex only; version ff and all-zero ids are
// invalid; a version above 00 may carry more fields after a '-', which are ignored; the flags are masked (bit 0
// sampled, bit 1 random), never compared. nullopt when invalid. The result is remote.
LENS_API std::optional<SpanContext> from_traceparent(std::string_view header) noexcept;

// W3C `tracestate`: list members "key=value" separated by commas. Returns the normalised header (members
// trimmed, empty members dropped), or empty when it is invalid (more than 32 members, a malformed member): an
// invalid tracestate is discarded whole, never partly propagated.
LENS_API std::string normalize_tracestate(std::string_view header);

// The fixed-size binary form: version byte 0, trace id, span id, flags.
using BinaryContext = std::array<std::uint8_t, 26>;
LENS_API BinaryContext to_binary(const SpanContext& context) noexcept;
// nullopt for an unknown version or all-zero ids. The result is remote.
LENS_API std::optional<SpanContext> from_binary(const BinaryContext& bytes) noexcept;

// The trace of iteration `iteration` of run `run_id` (TRACE_LAYOUT=step, CONTRACT §6): the first 16 bytes of
// SHA-256 of "lens.step/<run_id>/<iteration>". Every rank derives the same id with no communication, so the
// step spans of all ranks share one trace, and a trace-id ratio sampler keeps or drops the same iterations
// everywhere. Start a step span in it with StartOptions{.trace_id = &id}.
LENS_API TraceId step_trace_id(std::string_view run_id, std::int64_t iteration) noexcept;
// The span id of a step trace's root, `lens.step` (CONTRACT §6), which one rank exports and every rank's step span
// is a child of: derived_span_id(step_trace, "lens.step.root"), so no rank waits for another to learn it.
LENS_API SpanId step_root_span_id(const TraceId& step_trace) noexcept;
// A span id every rank derives alike: the first 8 bytes of SHA-256 of "lens.span/<32 hex trace id>/<key>" (never
// all zero). The two ends of one transfer each start their span with their own id (StartOptions{.span_id}) and
// link to the other's, with no message between them:
//   const lens::SpanId mine = lens::derived_span_id(trace, "p2p/forward/mb3/0>1/send");
//   const lens::SpanId peer = lens::derived_span_id(trace, "p2p/forward/mb3/0>1/recv");
LENS_API SpanId derived_span_id(const TraceId& trace, std::string_view key) noexcept;

#else  // LENS_DISABLED: no context ever exists.

inline std::string to_traceparent(const SpanContext&) { return {}; }
inline std::optional<SpanContext> from_traceparent(std::string_view) noexcept { return std::nullopt; }
inline std::string normalize_tracestate(std::string_view) { return {}; }
using BinaryContext = std::array<std::uint8_t, 26>;
inline BinaryContext to_binary(const SpanContext&) noexcept { return {}; }
inline std::optional<SpanContext> from_binary(const BinaryContext&) noexcept { return std::nullopt; }
inline TraceId step_trace_id(std::string_view, std::int64_t) noexcept { return {}; }
inline SpanId step_root_span_id(const TraceId&) noexcept { return {}; }
inline SpanId derived_span_id(const TraceId&, std::string_view) noexcept { return {}; }

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens
