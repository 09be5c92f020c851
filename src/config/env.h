// Reading and validating environment values: one place for "trimmed, empty = unset", the prefix/fallback
// chain and the wording of every ConfigError, shared by configuration and rank detection.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/text.h"
#include "lens/config.h"

namespace lens::internal {

// Looks a variable up; nullopt when unset. The process environment in production, a map in tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();

// A value found in the environment, trimmed and non-empty, with the variable it came from.
struct EnvValue {
  std::string text;
  std::string variable;
  bool secret = false;  // its text must never appear in a message
};

class EnvReader {
 public:
  EnvReader(EnvLookup lookup, std::string_view prefix, std::string_view fallback_prefix);

  // A plain variable (OTEL_*, launcher variables).
  std::optional<EnvValue> get(std::string_view name) const;
  // The first of the first given: for each prefix in turn (primary, then fallback), each key in turn (the key,
  // then its aliases).
  std::optional<EnvValue> lens_key(std::initializer_list<std::string_view> keys) const;

 private:
  EnvLookup lookup_;
  std::string prefix_, fallback_;
};

// Throws ConfigError: "lens: VAR='value' is invalid: expected <expected>" (the value hidden when secret).
[[noreturn]] void throw_invalid(const EnvValue& value, std::string_view expected);

// 1/true/yes/on, 0/false/no/off, any case (the lens keys).
bool parse_flag(const EnvValue& value);
// true/false, any case: the OpenTelemetry boolean (OTEL_SDK_DISABLED, *_INSECURE).
bool parse_otel_bool(const EnvValue& value);
// A whole decimal integer in [min, max].
std::int64_t parse_int(const EnvValue& value, std::int64_t min, std::int64_t max);
// A finite number in [min, max].
// A delay, interval or timeout in milliseconds, in [min_ms, kMaxDurationMs].
std::int64_t parse_duration_ms(const EnvValue& value, std::int64_t min_ms);
double parse_number(const EnvValue& value, double min, double max);

// One of a fixed set of names, any case.
template <typename T>
T parse_choice(const EnvValue& value, std::initializer_list<std::pair<std::string_view, T>> choices);

// The key-value list of OTEL_EXPORTER_OTLP_*HEADERS: `k=v,k2=v2`, percent-decoded. Messages name the entry by
// position, never its value.
std::vector<std::pair<std::string, std::string>> parse_headers(const EnvValue& value);

// Builds a Config from `env` (the body of Config::from_env).
Config config_from(const EnvLookup& env, std::string_view prefix, std::string_view fallback_prefix,
                   std::string_view default_service_name, const Catalogue& catalogue);

// --- template definition ---

template <typename T>
T parse_choice(const EnvValue& value, std::initializer_list<std::pair<std::string_view, T>> choices) {
  std::string want = to_lower(value.text);
  for (const auto& [name, result] : choices)
    if (want == name) return result;
  std::string names;
  for (const auto& choice : choices) names += (names.empty() ? "" : ", ") + std::string(choice.first);
  throw_invalid(value, "one of " + names);
}

}  // namespace lens::internal
