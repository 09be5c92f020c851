#include "config/env.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/text.h"

namespace lens::internal {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

EnvReader::EnvReader(EnvLookup lookup, std::string_view prefix, std::string_view fallback_prefix)
    : lookup_(std::move(lookup)), prefix_(prefix), fallback_(fallback_prefix) {}

std::optional<EnvValue> EnvReader::get(std::string_view name) const {
  std::string variable(name);
  std::optional<std::string> raw = lookup_(variable);
  if (!raw) return std::nullopt;
  std::string_view text = trim(*raw);
  if (text.empty()) return std::nullopt;  // empty means unset (CONTRACT §2)
  return EnvValue{std::string(text), std::move(variable)};
}

std::optional<EnvValue> EnvReader::lens_key(std::initializer_list<std::string_view> keys) const {
  for (const std::string& prefix : {prefix_, fallback_}) {
    if (prefix.empty()) continue;
    for (std::string_view key : keys)
      if (auto value = get(prefix + "_" + std::string(key))) return value;
    if (prefix_ == fallback_) break;
  }
  return std::nullopt;
}

void throw_invalid(const EnvValue& value, std::string_view expected) {
  std::string shown = value.secret ? "<value hidden>" : "'" + printable_excerpt(value.text) + "'";
  throw ConfigError("lens: " + value.variable + "=" + shown + " is invalid: expected " + std::string(expected));
}

bool parse_flag(const EnvValue& value) {
  return parse_choice<bool>(value, {{"1", true},
                                    {"true", true},
                                    {"yes", true},
                                    {"on", true},
                                    {"0", false},
                                    {"false", false},
                                    {"no", false},
                                    {"off", false}});
}

bool parse_otel_bool(const EnvValue& value) { return parse_choice<bool>(value, {{"true", true}, {"false", false}}); }

std::int64_t parse_int(const EnvValue& value, std::int64_t min, std::int64_t max) {
  if (auto n = whole_number(value.text, min, max)) return *n;
  throw_invalid(value, max == INT64_MAX ? "an integer >= " + std::to_string(min)
                                        : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

std::int64_t parse_duration_ms(const EnvValue& value, std::int64_t min_ms) {
  if (auto n = whole_number(value.text, min_ms, kMaxDurationMs)) return *n;
  throw_invalid(value,
                "milliseconds in [" + std::to_string(min_ms) + ", " + std::to_string(kMaxDurationMs) + "] (one day)");
}

double parse_number(const EnvValue& value, double min, double max) {
  char* stop = nullptr;
  double result = std::strtod(value.text.c_str(), &stop);
  bool whole = stop == value.text.c_str() + value.text.size();
  if (!whole || !std::isfinite(result) || result < min || result > max) {
    char range[64];
    std::snprintf(range, sizeof range, "a number in [%g, %g]", min, max);
    throw_invalid(value, range);
  }
  return result;
}

std::vector<std::pair<std::string, std::string>> parse_headers(const EnvValue& value) {
  std::vector<std::pair<std::string, std::string>> headers;
  std::size_t position = 0;
  for (std::string_view entry : split(value.text, ',')) {
    ++position;
    if (trim(entry).empty()) continue;
    std::size_t eq = entry.find('=');
    std::string_view key = trim(entry.substr(0, eq));
    std::optional<std::string> decoded_key = percent_decode(key);
    std::optional<std::string> decoded_value =
        eq == std::string_view::npos ? std::nullopt : percent_decode(trim(entry.substr(eq + 1)));
    if (key.empty() || !decoded_key || !decoded_value) {
      throw ConfigError("lens: " + value.variable + " is invalid: entry " + std::to_string(position) +
                        " is not a key=value pair with valid %XX escapes (header values are never shown)");
    }
    headers.emplace_back(std::move(*decoded_key), std::move(*decoded_value));
  }
  return headers;
}

}  // namespace lens::internal
