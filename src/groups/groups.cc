#include "lens/groups.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/text.h"
#include "groups/switch.h"
#include "lens/config_error.h"

namespace lens {

namespace internal {

std::atomic<std::uint64_t> g_enabled_group_bits{0};
std::atomic<std::uint64_t> g_recorded_group_bits{0};
std::atomic<std::uint64_t> g_enabled_set_bits{0};

namespace {
// Read and written only off the hot path, so a plain atomic is enough.
std::atomic<std::uint64_t> g_ceiling_bits{0};
std::atomic<std::uint64_t> g_position_bits{0};
std::atomic<bool> g_sampler_records{true};
std::atomic<bool> g_outside_catalogue{false};

// The enabled set `enabled`, and what the span sites read of it: nothing of it where the sampler drops every span.
void store_enabled(std::uint64_t enabled) noexcept {
  g_enabled_set_bits.store(enabled, std::memory_order_release);
  const std::uint64_t recorded = g_sampler_records.load(std::memory_order_relaxed) ? enabled : 0;
  g_enabled_group_bits.store(recorded, std::memory_order_release);
  g_recorded_group_bits.store(recorded | g_position_bits.load(std::memory_order_relaxed), std::memory_order_release);
}
}  // namespace

void install_span_groups(GroupSet ceiling, GroupSet enabled, GroupSet positions, bool sampler_records) noexcept {
  g_ceiling_bits.store(ceiling.bits(), std::memory_order_relaxed);
  g_position_bits.store(positions.bits(), std::memory_order_relaxed);
  g_sampler_records.store(sampler_records, std::memory_order_relaxed);
  g_outside_catalogue.store(false, std::memory_order_relaxed);
  store_enabled(enabled.bits() & ceiling.bits());
}

void clear_span_groups() noexcept {
  g_position_bits.store(0, std::memory_order_relaxed);
  g_sampler_records.store(true, std::memory_order_relaxed);
  g_outside_catalogue.store(false, std::memory_order_relaxed);
  store_enabled(0);
}

bool set_outside_catalogue_enabled(bool on) noexcept {
  const bool now = on && g_ceiling_bits.load(std::memory_order_relaxed) != 0;
  g_outside_catalogue.store(now, std::memory_order_release);
  return now;
}

bool records_ungated_spans() noexcept {
  return g_enabled_set_bits.load(std::memory_order_relaxed) != 0 || g_outside_catalogue.load(std::memory_order_relaxed);
}

}  // namespace internal

GroupSet enabled_span_groups() noexcept {
  return GroupSet(internal::g_enabled_set_bits.load(std::memory_order_acquire));
}

GroupSet set_enabled_span_groups(GroupSet groups) noexcept {
  std::uint64_t bits = groups.bits() & internal::g_ceiling_bits.load(std::memory_order_relaxed);
  internal::store_enabled(bits);
  return GroupSet(bits);
}

namespace {

std::vector<std::string> valid_names(const Catalogue& catalogue) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < catalogue.group_count(); ++i)
    names.emplace_back(catalogue.group_name(SpanGroup(static_cast<std::uint8_t>(i))));
  for (std::size_t i = 0; i < catalogue.preset_count(); ++i) names.emplace_back(catalogue.preset(i).name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());  // a preset may share a group's name
  return names;
}

// `token` as the user wrote it; the suggestion is looked for with the lower-cased form (a removal's with its `-`).
[[noreturn]] void throw_unknown_token(const Catalogue& catalogue, std::string_view token, std::string_view spec,
                                      std::string_view source) {
  std::vector<std::string> names = valid_names(catalogue);
  std::string wanted = internal::to_lower(token);
  const bool removal = !wanted.empty() && wanted.front() == '-';
  if (removal) wanted = internal::trim(std::string_view(wanted).substr(1));
  const std::string suggestion = (removal ? "-" : "") + internal::closest(wanted, names);
  std::string message =
      "lens: unknown span group '" + internal::printable_excerpt(token) + "' in " + std::string(source) + "='" +
      internal::printable_excerpt(spec) + "'; did you mean '" + suggestion +
      "'? Valid names (groups and presets, each also as -name to remove it): " + internal::join(names, ", ");
  throw ConfigError(message);
}

// The groups one name stands for: a preset first, then a group; false when it is neither.
bool lookup(const Catalogue& catalogue, std::string_view name, GroupSet* out) {
  if (const Catalogue::Preset* preset = catalogue.find_preset(name)) {
    *out = preset->groups;
    return true;
  }
  SpanGroup group(0);
  if (!catalogue.find_group(name, &group)) return false;
  *out = GroupSet{group};
  return true;
}

}  // namespace

GroupSet resolve(const Catalogue& catalogue, std::string_view spec, std::string_view source) {
  GroupSet added, removed;
  for (std::string_view raw : internal::split(spec, ',')) {
    const std::string token = internal::to_lower(internal::trim(raw));
    if (token.empty()) continue;
    const bool removal = token.front() == '-';
    const std::string name(removal ? internal::trim(std::string_view(token).substr(1)) : std::string_view(token));
    GroupSet groups;
    if (!lookup(catalogue, name, &groups)) throw_unknown_token(catalogue, internal::trim(raw), spec, source);
    (removal ? removed : added) = (removal ? removed : added) | groups;
  }
  return GroupSet(added.bits() & ~removed.bits());
}

std::string describe(const Catalogue& catalogue, GroupSet set) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < catalogue.group_count(); ++i) {
    const SpanGroup group(static_cast<std::uint8_t>(i));
    if (set.contains(group)) names.emplace_back(catalogue.group_name(group));
  }
  return internal::join(names, ",");
}

}  // namespace lens
