// The one JSON string escaper of everything lens writes by hand: the OTLP/JSON encoder (on the export path), the
// hang snapshots and process records, control.json, Prometheus's file_sd targets, and the `lens` tool's Chrome
// JSON. Its output is always valid JSON in valid UTF-8, whatever the input: a span name, an attribute or a thread
// name cut by the kernel in the middle of a character reaches every strict parser (simdjson, nlohmann, Python's
// json, Node's JSON.parse) as text with U+FFFD where the bad bytes were, never as a file they refuse.
//
//   std::string line = "{\"name\":" + json_string(name) + "}";
//   char* end = escape_json(name, cursor);  // a raw buffer with max_escaped_size(name.size()) bytes of room
//
// Escaped: '"' and '\\'; control bytes as \n \t \r \b \f, or \u00XX. Replaced by U+FFFD, one for each byte that
// starts no valid sequence: a stray continuation byte, a sequence cut short, an overlong form, a UTF-16 surrogate
// (ED A0-BF), a code point past U+10FFFF. Header-only, so the encoder's loop inlines it.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace lens::internal {

// The most bytes escape_json writes for `n` input bytes: a control byte becomes six ("\u001b"), a bad byte three.
constexpr std::size_t max_escaped_size(std::size_t n) noexcept { return 6 * n; }

// The length of the valid UTF-8 sequence at text[i] (2 to 4; text[i] >= 0x80), or 0 when none starts there
// (RFC 3629's table: the second byte's range depends on the first).
constexpr std::size_t utf8_sequence_length(std::string_view text, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = byte(0);
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;   // overlong below
    if (c == 0xED) high = 0x9F;  // surrogates above
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;   // overlong below
    if (c == 0xF4) high = 0x8F;  // past U+10FFFF above
  }
  if (n == 0 || i + n > text.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((byte(k) & 0xC0) != 0x80) return 0;
  return n;
}

// Writes `text` escaped (no quotes) at `out`, which has room for max_escaped_size(text.size()) bytes; returns the
// end of what it wrote.
inline char* escape_json(std::string_view text, char* out) noexcept {
  constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {  // the common case: printable ASCII
      *out++ = static_cast<char>(c);
      ++i;
    } else if (c == '"' || c == '\\') {
      *out++ = '\\';
      *out++ = static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      const char named = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : c == '\b' ? 'b' : c == '\f' ? 'f' : '\0';
      *out++ = '\\';
      if (named != 0) {
        *out++ = named;
      } else {
        std::memcpy(out, "u00", 3);
        out[3] = kHex[c >> 4];
        out[4] = kHex[c & 15];
        out += 5;
      }
      ++i;
    } else if (const std::size_t n = utf8_sequence_length(text, i); n != 0) {
      std::memcpy(out, text.data() + i, n);
      out += n;
      i += n;
    } else {
      std::memcpy(out, "\xEF\xBF\xBD", 3);  // U+FFFD
      out += 3;
      ++i;
    }
  }
  return out;
}

// Appends `text` escaped (no quotes) to `out`.
inline void append_json_escaped(std::string& out, std::string_view text) {
  const std::size_t at = out.size();
  out.resize(at + max_escaped_size(text.size()));
  out.resize(static_cast<std::size_t>(escape_json(text, out.data() + at) - out.data()));
}

// `text` as a JSON string literal, quotes included.
inline std::string json_string(std::string_view text) {
  std::string out = "\"";
  append_json_escaped(out, text);
  return out + '"';
}

}  // namespace lens::internal
