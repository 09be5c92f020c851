// lens/groups.h: span groups, the run-time switch for how fine a trace is.
//
// Every span belongs to one group. A group is a small integer (at most 64 per catalogue) and the enabled set
// is a 64-bit mask, so asking "is this group on?" is one relaxed atomic load and one bit test, inlined at the
// call site: cheap enough to leave instrumentation in production code and switch it at run time.
//
// A catalogue names the groups and the presets that a span-group spec may use. lens ships the base catalogue
// (8 groups) and the Megatron catalogue (16 groups, <lens/megatron.h>); a consumer may build its own by
// extending the base one, at compile time.
//
//   if (LENS_GROUP_ENABLED(lens::group::step)) {
//     // build an expensive attribute only when anyone will see it
//   }
//   lens::GroupSet set = lens::resolve(lens::base_catalogue(), "default, step", "--otel-span-groups");
//   lens::set_enabled_span_groups(set);   // visible to every thread at its next check
//
// Compiled with LENS_DISABLED, LENS_GROUP_ENABLED is the constant `false` (its argument is not evaluated) and
// the functions below are header-only no-ops: such a translation unit references no lens symbol.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "lens/internal/visibility.h"

namespace lens {

// One span group: an index into a catalogue. Construction from a bare integer is explicit so that
// `is_enabled(3)` does not compile; use the named constants (lens::group::step, lens::megatron::group::layer).
class SpanGroup {
 public:
  static constexpr std::uint8_t kMaxGroups = 64;

  constexpr explicit SpanGroup(std::uint8_t id) : id_(id) {
    if (id >= kMaxGroups) throw std::out_of_range("lens: a span group id must be below 64");
  }
  constexpr std::uint8_t id() const noexcept { return id_; }
  constexpr std::uint64_t bit() const noexcept { return std::uint64_t{1} << id_; }
  friend constexpr bool operator==(SpanGroup, SpanGroup) = default;

 private:
  std::uint8_t id_;
};

// A set of span groups, as a bit mask.
class GroupSet {
 public:
  constexpr GroupSet() = default;
  constexpr explicit GroupSet(std::uint64_t bits) : bits_(bits) {}
  constexpr GroupSet(std::initializer_list<SpanGroup> groups) {
    for (SpanGroup g : groups) bits_ |= g.bit();
  }
  constexpr std::uint64_t bits() const noexcept { return bits_; }
  constexpr bool contains(SpanGroup g) const noexcept { return (bits_ & g.bit()) != 0; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr GroupSet operator|(GroupSet o) const noexcept { return GroupSet(bits_ | o.bits_); }
  constexpr GroupSet operator&(GroupSet o) const noexcept { return GroupSet(bits_ & o.bits_); }
  friend constexpr bool operator==(GroupSet, GroupSet) = default;

 private:
  std::uint64_t bits_ = 0;
};

// The 8 base groups of CONTRACT §1, in catalogue order.
namespace group {
inline constexpr SpanGroup job{0};
inline constexpr SpanGroup checkpoint{1};
inline constexpr SpanGroup evaluate{2};
inline constexpr SpanGroup model_init{3};
inline constexpr SpanGroup load_checkpoint{4};
inline constexpr SpanGroup step{5};
inline constexpr SpanGroup forward_backward{6};
inline constexpr SpanGroup optimizer{7};
}  // namespace group

// The names a span-group spec may use: groups (index = SpanGroup id) and presets. A literal type, so whole
// catalogues are built at compile time and a mistake in one (a duplicate or upper-case name, a 65th group)
// is a compile error (at run time, std::invalid_argument or std::length_error). Names must have static storage duration
// (string literals): they are kept as views.
class Catalogue {
 public:
  static constexpr std::size_t kMaxPresets = 16;
  struct Preset {
    std::string_view name;
    GroupSet groups;
  };

  constexpr Catalogue() = default;

  // Adds the next group; returns its id, which the consumer's named constant must equal.
  constexpr SpanGroup add_group(std::string_view name) {
    check_name(name);
    SpanGroup unused(0);
    if (find_group(name, &unused)) throw std::invalid_argument("lens: duplicate span group name");
    if (group_count_ >= SpanGroup::kMaxGroups) throw std::length_error("lens: a catalogue holds at most 64 groups");
    group_names_[group_count_] = name;
    return SpanGroup(group_count_++);
  }

  // Adds a preset, or replaces the preset of that name. A preset may share a group's name: spec tokens are
  // looked up as presets first.
  constexpr void set_preset(std::string_view name, GroupSet groups) {
    if ((groups.bits() & ~all().bits()) != 0)
      throw std::invalid_argument("lens: preset names a group outside the catalogue");
    for (std::size_t i = 0; i < preset_count_; ++i) {
      if (presets_[i].name == name) {
        presets_[i].groups = groups;
        return;
      }
    }
    check_name(name);
    if (preset_count_ >= kMaxPresets) throw std::length_error("lens: a catalogue holds at most 16 presets");
    presets_[preset_count_++] = Preset{name, groups};
  }

  // Drops every preset: an extending consumer's presets replace the base ones (CONTRACT §1).
  constexpr void clear_presets() { preset_count_ = 0; }

  constexpr std::size_t group_count() const noexcept { return group_count_; }
  constexpr std::size_t preset_count() const noexcept { return preset_count_; }
  constexpr std::string_view group_name(SpanGroup g) const noexcept {
    return g.id() < group_count_ ? group_names_[g.id()] : std::string_view{};
  }
  constexpr const Preset& preset(std::size_t i) const { return presets_.at(i); }

  // Every group of the catalogue.
  constexpr GroupSet all() const noexcept {
    return GroupSet(group_count_ == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << group_count_) - 1);
  }

  // Exact (already lower-cased) lookups; nullptr / false when absent.
  constexpr const Preset* find_preset(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < preset_count_; ++i)
      if (presets_[i].name == name) return &presets_[i];
    return nullptr;
  }
  constexpr bool find_group(std::string_view name, SpanGroup* out) const noexcept {
    for (std::uint8_t i = 0; i < group_count_; ++i) {
      if (group_names_[i] == name) {
        *out = SpanGroup(i);
        return true;
      }
    }
    return false;
  }

 private:
  static constexpr void check_name(std::string_view name) {
    if (name.empty()) throw std::invalid_argument("lens: a span group or preset name must not be empty");
    for (char c : name) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      if (!ok) throw std::invalid_argument("lens: span group and preset names are lower-case [a-z0-9_]");
    }
  }

  std::array<std::string_view, SpanGroup::kMaxGroups> group_names_{};
  std::array<Preset, kMaxPresets> presets_{};
  std::uint8_t group_count_ = 0;
  std::uint8_t preset_count_ = 0;
};

// The base catalogue of CONTRACT §1: 8 groups; presets default, per_step, all (aliases profiling, full).
constexpr Catalogue base_catalogue() {
  Catalogue c;
  for (std::string_view name :
       {"job", "checkpoint", "evaluate", "model_init", "load_checkpoint", "step", "forward_backward", "optimizer"})
    c.add_group(name);
  c.set_preset("default", {group::job, group::checkpoint, group::evaluate});
  c.set_preset("per_step", c.all());
  for (std::string_view name : {"all", "profiling", "full"}) c.set_preset(name, c.all());
  return c;
}

namespace internal {
// The enabled set (the groups whose spans are exported), and the groups whose span sites run: the enabled set and,
// with hang snapshots on, the loop's groups kept only as positions (CONTRACT §10). Written by setup and
// set_enabled_span_groups; every span site reads g_recorded_group_bits. Where the sampler drops every span
// (always_off, known at setup) neither holds the enabled set, so its spans cost what a disabled group's do;
// g_enabled_set_bits holds it always (enabled_span_groups, NeMo Lens's is_span_group_enabled).
LENS_API extern std::atomic<std::uint64_t> g_enabled_group_bits;
LENS_API extern std::atomic<std::uint64_t> g_recorded_group_bits;
LENS_API extern std::atomic<std::uint64_t> g_enabled_set_bits;
// Groups named outside the catalogue (Python's set_enabled_span_groups with a library's own group, as Megatron's
// trace_region under the base catalogue): their spans are ungated spans here, as they name no group of the
// catalogue. Turned on only where the enabled set may be (an exporting rank with traces on); setup and
// clear_span_groups turn it off. Returns the state now in force.
LENS_API bool set_outside_catalogue_enabled(bool on) noexcept;
// Whether an ungated span (span_cm, the OpenTelemetry API's spans, a group outside the catalogue) is recorded now:
// some group of the enabled set, or one outside the catalogue, is on.
LENS_API bool records_ungated_spans() noexcept;
template <typename>
inline constexpr bool kNotASpanGroup = false;
}  // namespace internal

// Misuse as a compile error that says what to write instead: is_enabled(3), is_enabled("step").
template <typename T>
bool is_enabled(T) noexcept {
  static_assert(internal::kNotASpanGroup<T>,
                "lens_is_enabled_takes_a_SpanGroup_constant: write lens::group::step or "
                "lens::megatron::group::layer, not an integer or a name");
  return false;
}

LENS_ABI_NAMESPACE_BEGIN

#if !defined(LENS_DISABLED)

// True when `g` is enabled now: its spans are recorded and exported. One relaxed load and a bit test; never a call.
LENS_ALWAYS_INLINE bool is_enabled(SpanGroup g) noexcept {
  return (internal::g_enabled_group_bits.load(std::memory_order_relaxed) & g.bit()) != 0;
}

namespace internal {
// True when a span site of `g` runs: `g` is enabled, or (with hang snapshots on) it is one of the loop's groups
// (step, forward_backward, microbatch, communication) kept as a position. What LENS_SPAN checks.
LENS_ALWAYS_INLINE bool is_recorded(SpanGroup g) noexcept {
  return (g_recorded_group_bits.load(std::memory_order_relaxed) & g.bit()) != 0;
}
}  // namespace internal

// The enabled set now.
LENS_API GroupSet enabled_span_groups() noexcept;

// Replaces the enabled set at run time, from any thread; every thread sees it at its next check. Only an
// exporting rank with traces on can enable anything (CONTRACT §1): elsewhere the set stays empty. Returns the set
// now in force.
LENS_API GroupSet set_enabled_span_groups(GroupSet groups) noexcept;

// Resolves a span-group spec (CONTRACT §1) against a catalogue: comma-separated tokens, each trimmed and
// lower-cased, empty tokens skipped, looked up as a preset first and then as a group. A token written `-name`
// removes that preset or group: the result is the union of the plain tokens minus the union of the removed ones,
// whatever their order (`all,-layer`). An empty spec is the empty set. An unknown token throws
// lens::ConfigError naming `source` (the variable or flag the spec came from), the token, every valid name and
// the closest one; nothing is applied.
LENS_API GroupSet resolve(const Catalogue& catalogue, std::string_view spec, std::string_view source);

// Names of the groups in `set`, comma-separated, in catalogue order.
LENS_API std::string describe(const Catalogue& catalogue, GroupSet set);

#else  // LENS_DISABLED: header-only no-ops.

constexpr bool is_enabled(SpanGroup) noexcept { return false; }
inline GroupSet enabled_span_groups() noexcept { return {}; }
inline GroupSet set_enabled_span_groups(GroupSet) noexcept { return {}; }
inline GroupSet resolve(const Catalogue&, std::string_view, std::string_view) { return {}; }
inline std::string describe(const Catalogue&, GroupSet) { return {}; }

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens

#if !defined(LENS_DISABLED)
#define LENS_GROUP_ENABLED(group) (::lens::internal::is_recorded(group))
#else
// Always false, its argument type-checked but not evaluated.
#define LENS_GROUP_ENABLED(group) (sizeof(::lens::is_enabled(group)) == 0)
#endif
