// Small text helpers shared by configuration parsing and span-group resolution.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lens::internal {

// Without leading and trailing ASCII whitespace.
std::string_view trim(std::string_view s) noexcept;
std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);
// Splits on `sep`; keeps empty pieces (callers decide what an empty piece means).
std::vector<std::string_view> split(std::string_view s, char sep);
// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view sep);
// Levenshtein edit distance: how a misspelt name finds the one meant.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` (first of equals), or empty when there are no candidates.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// The whole of `text` as a decimal integer in [min, max] (a leading '+' allowed); nullopt for anything else: empty,
// a sign alone, another character anywhere, a value out of range (never clamped, never thrown). Every number lens
// reads from the environment, a file or a peer goes through it.
std::optional<std::int64_t> whole_number(std::string_view text, std::int64_t min = INT64_MIN,
                                         std::int64_t max = INT64_MAX) noexcept;

}  // namespace lens::internal

namespace lens::internal {
// Decodes %XX escapes (W3C Baggage / OTEL_RESOURCE_ATTRIBUTES / OTLP headers); nullopt on a malformed escape.
std::optional<std::string> percent_decode(std::string_view s);
// Writes every byte for which `escaped` is true as %XX (upper-case hex); percent_decode reverses it.
std::string percent_encode(std::string_view s, bool (*escaped)(unsigned char));
}  // namespace lens::internal

namespace lens::internal {
// What lens may show of text that came from outside (a collector's error message, a response body): at most
// `max_bytes` (then "..."), every control byte (ESC, CR, LF, NUL, DEL, ...) written as \xNN, so nothing a
// collector sends can move a terminal's cursor or forge a log line; a bidirectional formatting character (U+202E,
// ...) is written as \uXXXX, so nothing reorders what is shown. Other bytes (UTF-8) are kept.
std::string printable_excerpt(std::string_view text, std::size_t max_bytes = 256);
// A page of text lens writes to a terminal (a report, a verdict): whole, its lines kept, every other control byte
// written as \xNN and every bidirectional formatting character as \uXXXX, so a span name or a value from a file
// cannot send an escape sequence to the reader's terminal or reorder what it shows.
std::string terminal_text(std::string_view text);
// A URL with its credentials taken out, for messages and summaries: "user:token@" becomes "***@" and a query
// ("?api_key=...") becomes "?***". Endpoints are shown this way everywhere.
std::string redact_url(std::string_view url);
}  // namespace lens::internal
