// Scope records: how a light scope is exported, the cheapest kept span. A light scope is a `LENS_SPAN` with a
// literal name and either no attributes or a few its call site packs (lens/internal/scope_attributes.h): it takes no
// slot. Its start writes its identity into its context entry and what its record needs beside it (LightScope,
// thread_state.h); its end queues one scope record, 64 bytes and 24 a packed attribute, in its thread's span queue,
// where span records go, and the exporters read it through SpanView like any span record.
//
// A scope record, eight 8-byte words, then its packed attributes (three words each):
//   0: kScopeRecordMark (u8, record.h: where a span record has the low byte of its size), the attribute count (u8), the
//      name's length (u16), RecordHeader's bits, trace flags, group (u16)
//   1: the name's pointer (a literal, never copied)
//   2: start tick   3: end tick   4: span id   5: parent span id (0: none)   6, 7: trace id
//   8...: the attributes as packed at the call site (a bool's value word read as its first byte: little-endian)
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/dcheck.h"
#include "lens/context.h"
#include "lens/internal/scope_attributes.h"
#include "trace/record.h"

namespace lens::internal {

static_assert(std::endian::native == std::endian::little, "a packed bool is read as its word's first byte");

inline constexpr std::uint32_t kScopeRecordBytes = 64;      // without attributes
inline constexpr std::size_t kMaxScopeNameLength = 0xffff;  // a longer literal name takes a slot

inline constexpr std::uint32_t scope_record_bytes(std::uint32_t attribute_count) noexcept {
  return kScopeRecordBytes + std::uint32_t{sizeof(PackedAttribute)} * attribute_count;
}

inline std::uint64_t scope_record_first_word(std::uint32_t attribute_count, std::uint16_t name_length,
                                             std::uint8_t bits, std::uint8_t trace_flags,
                                             std::uint16_t group) noexcept {
  return kScopeRecordMark | std::uint64_t{attribute_count} << 8 | std::uint64_t{name_length} << 16 |
         std::uint64_t{bits} << 32 | std::uint64_t{trace_flags} << 40 | std::uint64_t{group} << 48;
}

// Word 0's fields, read back (the one reading of the layout above, for SpanView and LightScope).
inline std::uint32_t scope_record_attribute_count(std::uint64_t first_word) noexcept {
  return static_cast<std::uint32_t>((first_word >> 8) & 0xff);
}
inline std::uint32_t scope_record_name_length(std::uint64_t first_word) noexcept {
  return static_cast<std::uint32_t>((first_word >> 16) & 0xffff);
}
inline std::uint8_t scope_record_bits(std::uint64_t first_word) noexcept {
  return static_cast<std::uint8_t>(first_word >> 32);
}
inline std::uint8_t scope_record_trace_flags(std::uint64_t first_word) noexcept {
  return static_cast<std::uint8_t>(first_word >> 40);
}
inline std::uint16_t scope_record_group(std::uint64_t first_word) noexcept {
  return static_cast<std::uint16_t>(first_word >> 48);
}

// Copies `count` packed attributes (at most kMaxScopeAttributes) to `to`, any alignment: a straight run of moves for
// each count, not a loop (at a light scope's start and again at its end).
template <std::uint32_t... N>
LENS_ALWAYS_INLINE void copy_packed_attributes(void* to, const PackedAttribute* from, std::uint32_t count,
                                               std::integer_sequence<std::uint32_t, N...>) noexcept {
  LENS_DCHECK(count <= kMaxScopeAttributes);
  static_cast<void>(
      ((count == N + 1 ? (std::memcpy(to, from, (N + 1) * sizeof(PackedAttribute)), true) : false) || ...));
}
LENS_ALWAYS_INLINE void copy_packed_attributes(void* to, const PackedAttribute* from, std::uint32_t count) noexcept {
  copy_packed_attributes(to, from, count, std::make_integer_sequence<std::uint32_t, kMaxScopeAttributes>());
}

// Writes a scope record at `at` (scope_record_bytes(attribute_count), any alignment): `attributes` holds
// attribute_count, first_word's count.
inline void write_scope_record(std::uint8_t* at, std::uint64_t first_word, const char* name, std::uint64_t start_tick,
                               std::uint64_t end_tick, const SpanId& span_id, const SpanId& parent_span_id,
                               const TraceId& trace_id, const PackedAttribute* attributes,
                               std::uint32_t attribute_count) noexcept {
  std::memcpy(at, &first_word, 8);
  std::memcpy(at + 8, &name, 8);
  std::memcpy(at + 16, &start_tick, 8);
  std::memcpy(at + 24, &end_tick, 8);
  std::memcpy(at + 32, span_id.bytes.data(), 8);
  std::memcpy(at + 40, parent_span_id.bytes.data(), 8);
  std::memcpy(at + 48, trace_id.bytes.data(), 16);
  LENS_DCHECK(attribute_count == scope_record_attribute_count(first_word));
  copy_packed_attributes(at + kScopeRecordBytes, attributes, attribute_count);
}

// The bytes of a record as queued: a scope record's, or a span record's (its header's size).
inline std::uint32_t record_bytes(const std::uint8_t* record) noexcept {
  if (record[0] == kScopeRecordMark) {
    std::uint64_t first_word;
    std::memcpy(&first_word, record, 8);
    return scope_record_bytes(scope_record_attribute_count(first_word));
  }
  std::uint32_t size;
  std::memcpy(&size, record, 4);
  return size;
}

// A thread's span and trace ids, every kind of span's, drawn from a count and seeds from the OS. A span id needs only
// to be unique: a seeded Weyl sequence through one xorshift-multiply round, a bijection of the count, so a thread's
// span ids never repeat (2^64 spans); the one count that would give 0 gives 1 instead. A root's trace id is sampled on
// (W3C level 2's random flag: its rightmost 7 bytes random): its right half is the root's span id under a second seed
// (so a bijection of the count too: a thread's roots never share a trace), its left half that under a third seed, never
// 0 (so the id never is). Cheaper than a general generator's draws (xoshiro256**: 3 a root span), and than a second mix
// for the trace.
class SpanIds {
 public:
  SpanIds() noexcept;
  SpanId next_span_id() noexcept {
    std::uint64_t z = seeds_[0] + ++spans_ * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 32)) * 0xD6E8FEB86659FD93ull;
    z |= (z == 0);
    SpanId id;
    std::memcpy(id.bytes.data(), &z, 8);
    return id;
  }
  // The trace of a root whose span id is `root` (next_span_id's).
  TraceId trace_id_of_root(const SpanId& root) const noexcept {
    std::uint64_t lo;
    std::memcpy(&lo, root.bytes.data(), 8);
    lo ^= seeds_[1];
    const std::uint64_t hi = lo ^ seeds_[2];
    TraceId id;
    std::memcpy(id.bytes.data(), &hi, 8);
    std::memcpy(id.bytes.data() + 8, &lo, 8);
    return id;
  }

 private:
  std::uint64_t seeds_[3];
  std::uint64_t spans_ = 0;
};

}  // namespace lens::internal
