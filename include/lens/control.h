// lens/control.h: changing a running job's span groups from outside, at the same iteration on every rank.
//
// With P_CONTROL=1, the job's rank 0 (when it exports) serves a control endpoint: HTTP on loopback (another
// address only with P_CONTROL_ADDRESS), authenticated by a random token that setup writes, with the port, to
// `<P_FILE_DIR>/<run id>/control.json`, readable by the job's user only. `lens ctl RUN_DIR span-groups SPEC
// [--for N]` asks for a change; `lens ctl RUN_DIR status` tells the groups, the iteration and the world size.
//
// The library never switches by itself: the ranks must switch at the same iteration, and only the consumer's own
// collective can tell when every rank has seen the request. So at every iteration boundary, on every rank:
//
//   lens::SpanGroupRequest mine = lens::take_span_group_request();   // rank 0: what was asked, else empty
//   std::array<std::int64_t, lens::SpanGroupRequest::kWords> words = mine.encode();
//   // ... all-reduce `words` with MAX along with the consumer's own per-iteration flags ...
//   if (auto change = lens::at_iteration_boundary(iteration, lens::SpanGroupRequest::decode(words)))
//     step_span.add_event("lens.span_groups.changed", {{"lens.span_groups", change->groups_text.c_str()}});
//
// Every rank then applies the same set from the same iteration on, bounded by its ceiling (a non-exporting rank
// stays empty); `--for N` puts the previous set back after N iterations. Each change is logged.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "lens/groups.h"
#include "lens/internal/visibility.h"

namespace lens {

// A change of span groups asked for through the control endpoint, as the ranks agree on it.
struct SpanGroupRequest {
  static constexpr int kWords = 4;
  std::int64_t id = 0;          // 0: nothing asked; ids grow, so MAX over ranks keeps rank 0's
  std::uint64_t groups = 0;     // the resolved set (rank 0's catalogue)
  std::int64_t iterations = 0;  // 0: until the next change; N: for N iterations, then the set before comes back

  // Non-negative 64-bit words (the set in two 32-bit halves): MAX or SUM with zeros elsewhere keeps them.
  std::array<std::int64_t, kWords> encode() const noexcept {
    return {id, static_cast<std::int64_t>(groups & 0xffffffffu), static_cast<std::int64_t>(groups >> 32), iterations};
  }
  static SpanGroupRequest decode(const std::array<std::int64_t, kWords>& w) noexcept {
    return {w[0], static_cast<std::uint64_t>(w[1]) | static_cast<std::uint64_t>(w[2]) << 32, w[3]};
  }
};

// What at_iteration_boundary did: a change, or the set before a `--for N` change coming back.
struct SpanGroupChange {
  std::int64_t iteration = 0;   // the first iteration with the new set
  GroupSet from, to;            // to: as applied on this rank (within its ceiling)
  std::int64_t iterations = 0;  // for how many iterations (0: until changed)
  bool restored = false;        // the end of a `--for N` change
  std::string groups_text;      // `to` by name, for the step span's event
};

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

// Rank 0: the request waiting for the next boundary (id 0 when none, on other ranks, or with the endpoint off).
LENS_API SpanGroupRequest take_span_group_request() noexcept;

// Every rank, once per iteration, before `iteration` starts: applies what the ranks agreed on (or restores the
// set before a `--for N` change whose N iterations are over), logs it, and says what changed.
LENS_API std::optional<SpanGroupChange> at_iteration_boundary(std::int64_t iteration,
                                                              const SpanGroupRequest& agreed) noexcept;

#else

inline SpanGroupRequest take_span_group_request() noexcept { return {}; }
inline std::optional<SpanGroupChange> at_iteration_boundary(std::int64_t, const SpanGroupRequest&) noexcept {
  return std::nullopt;
}

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens
