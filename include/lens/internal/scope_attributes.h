// lens/internal/scope_attributes.h: a LENS_SPAN's attributes packed at its call site, for a light scope. Not for users.
//
// A LENS_SPAN with a literal name and up to 8 attributes, each a literal key and a number, a bool or a literal string,
// is recorded as a light scope (src/trace/scope_record.h): no slot, its attributes kept beside its context entry and
// copied into its scope record at its end. Its call site packs each attribute into three words, the literals by
// pointer: the compiler knows there which keys and values are literals and what they hold, so every check folds away
// and an attribute costs three stores.
//
//   key:   the key's pointer
//   value: an int64, a double's bits, a bool (0 or 1), or a string's pointer
//   shape: the key's length (u16) | its ValueType (u8) << 16 | a string's length (u32) << 32
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "lens/attributes.h"
#include "lens/internal/visibility.h"

namespace lens::internal {

inline constexpr std::size_t kMaxScopeAttributes = 8;
inline constexpr std::size_t kMaxScopeKeyLength = 0xffff;
inline constexpr std::size_t kMaxScopeStringLength = 0xffffffff;

struct PackedAttribute {
  const char* key;
  std::uint64_t value;
  std::uint64_t shape;
};

// A LENS_SPAN's packed attributes, as its call site passes them (in two registers).
struct ScopeAttributes {
  const PackedAttribute* packed;
  std::uint32_t count;
  std::uint32_t longest_string;  // bytes: checked against the configured value length limit
};

LENS_ALWAYS_INLINE constexpr bool is_packable(const Attribute& a) noexcept {
  if (!a.key.is_static() || a.key.text().size() > kMaxScopeKeyLength) return false;
  switch (a.value.type()) {
    case ValueType::kBool:
    case ValueType::kInt:
    case ValueType::kDouble: return true;
    case ValueType::kString: return a.value.is_static() && a.value.as_string().size() <= kMaxScopeStringLength;
    default: return false;
  }
}

// The attributes of a LENS_SPAN's list read one by one, at constant indices, never past its size: at the call site the
// compiler then knows each one's kind (a loop over the list, which GCC did not unroll, kept every check at run time
// and the list in memory).
template <typename Each, std::size_t... I>
LENS_ALWAYS_INLINE constexpr bool all_of_list(std::initializer_list<Attribute> attributes, Each each,
                                              std::index_sequence<I...>) noexcept {
  return attributes.size() <= sizeof...(I) && ((I >= attributes.size() || each(attributes.begin()[I])) && ...);
}
template <typename Each>
LENS_ALWAYS_INLINE constexpr bool all_of_list(std::initializer_list<Attribute> attributes, Each each) noexcept {
  return all_of_list(attributes, each, std::make_index_sequence<kMaxScopeAttributes>());
}

// Whether a LENS_SPAN's attributes can be packed (at its call site, a constant).
LENS_ALWAYS_INLINE constexpr bool are_packable(std::initializer_list<Attribute> attributes) noexcept {
  return all_of_list(attributes, [](const Attribute& a) LENS_ALWAYS_INLINE_LAMBDA { return is_packable(a); });
}

LENS_ALWAYS_INLINE constexpr std::uint32_t longest_string(std::initializer_list<Attribute> attributes) noexcept {
  std::size_t longest = 0;
  all_of_list(attributes, [&](const Attribute& a) LENS_ALWAYS_INLINE_LAMBDA {
    if (a.value.type() == ValueType::kString && a.value.as_string().size() > longest)
      longest = a.value.as_string().size();
    return true;
  });
  return static_cast<std::uint32_t>(longest);
}

// Packs `a` (is_packable).
LENS_ALWAYS_INLINE PackedAttribute pack(const Attribute& a) noexcept {
  const ValueType type = a.value.type();
  PackedAttribute p{a.key.text().data(), 0, a.key.text().size() | std::uint64_t{static_cast<std::uint8_t>(type)} << 16};
  switch (type) {
    case ValueType::kBool: p.value = a.value.as_bool() ? 1 : 0; break;
    case ValueType::kInt: p.value = static_cast<std::uint64_t>(a.value.as_int()); break;
    case ValueType::kDouble: p.value = std::bit_cast<std::uint64_t>(a.value.as_double()); break;
    default:
      p.value = std::bit_cast<std::uint64_t>(a.value.as_string().data());
      p.shape |= std::uint64_t{a.value.as_string().size()} << 32;
  }
  return p;
}

// Packs a LENS_SPAN's attributes (are_packable) into `packed`.
LENS_ALWAYS_INLINE void pack_list(std::initializer_list<Attribute> attributes, PackedAttribute* packed) noexcept {
  all_of_list(attributes, [&](const Attribute& a) LENS_ALWAYS_INLINE_LAMBDA {
    *packed++ = pack(a);
    return true;
  });
}

// The fields of a packed attribute, read back.
inline std::string_view packed_key(const PackedAttribute& p) noexcept {
  return {p.key, static_cast<std::size_t>(p.shape & 0xffff)};
}
inline ValueType packed_type(const PackedAttribute& p) noexcept {
  return static_cast<ValueType>((p.shape >> 16) & 0xff);
}
inline std::string_view packed_string(const PackedAttribute& p) noexcept {
  return {std::bit_cast<const char*>(p.value), static_cast<std::size_t>(p.shape >> 32)};
}
// As an Attribute, for the slot path (a literal string as a view: copied there).
inline Attribute unpack(const PackedAttribute& p) noexcept {
  const AttributeKey key(LiteralText{}, packed_key(p));
  switch (packed_type(p)) {
    case ValueType::kBool: return {key, p.value != 0};
    case ValueType::kInt: return {key, static_cast<std::int64_t>(p.value)};
    case ValueType::kDouble: return {key, std::bit_cast<double>(p.value)};
    default: return {key, packed_string(p)};
  }
}

}  // namespace lens::internal
