#include "lens/groups.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/text.h"
#include "groups/switch.h"
#include "lens/config.h"

namespace lens {

namespace internal {

std::atomic<std::uint64_t> g_enabled_group_bits{0};

namespace {
// Read and written only off the hot path, so a plain atomic is enough.
std::atomic<std::uint64_t> g_ceiling_bits{0};
}  // namespace

void install_span_groups(GroupSet ceiling, GroupSet enabled) noexcept {
  g_ceiling_bits.store(ceiling.bits(), std::memory_order_relaxed);
  g_enabled_group_bits.store(enabled.bits() & ceiling.bits(), std::memory_order_release);
}

}  // namespace internal

GroupSet enabled_span_groups() noexcept {
  return GroupSet(internal::g_enabled_group_bits.load(std::memory_order_acquire));
}

GroupSet set_enabled_span_groups(GroupSet groups) noexcept {
  std::uint64_t bits = groups.bits() & internal::g_ceiling_bits.load(std::memory_order_relaxed);
  internal::g_enabled_group_bits.store(bits, std::memory_order_release);
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

// `token` as the user wrote it; the suggestion is looked for with the lower-cased form.
[[noreturn]] void throw_unknown_token(const Catalogue& catalogue, std::string_view token, std::string_view spec,
                                      std::string_view source) {
  std::vector<std::string> names = valid_names(catalogue);
  std::string message = "lens: unknown span group '" + std::string(token) + "' in " + std::string(source) + "='" +
                        std::string(spec) + "'; did you mean '" + internal::closest(internal::to_lower(token), names) +
                        "'? Valid names (groups and presets): " + internal::join(names, ", ");
  throw ConfigError(message);
}

}  // namespace

GroupSet resolve(const Catalogue& catalogue, std::string_view spec, std::string_view source) {
  GroupSet result;
  for (std::string_view raw : internal::split(spec, ',')) {
    std::string token = internal::to_lower(internal::trim(raw));
    if (token.empty()) continue;
    if (const Catalogue::Preset* preset = catalogue.find_preset(token)) {
      result = result | preset->groups;
      continue;
    }
    SpanGroup group(0);
    if (!catalogue.find_group(token, &group)) throw_unknown_token(catalogue, internal::trim(raw), spec, source);
    result = result | GroupSet{group};
  }
  return result;
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
