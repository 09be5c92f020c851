#include "common/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <numeric>

namespace lens::internal {

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
}  // namespace

std::optional<std::int64_t> whole_number(std::string_view text, std::int64_t min, std::int64_t max) noexcept {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);  // from_chars refuses it; people write it
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max) return std::nullopt;
  return value;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string to_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    std::size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out += sep;
    out += items[i];
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const std::string& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

}  // namespace lens::internal

namespace lens::internal {

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string percent_encode(std::string_view s, bool (*escaped)(unsigned char)) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (escaped(u)) {
      out += {'%', kHex[u >> 4], kHex[u & 15]};
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace lens::internal

namespace lens::internal {

namespace {
// The Unicode code point of a bidirectional formatting character (U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069) starting `text` in UTF-8, else 0. Shown as they are, they reorder what a terminal displays (a
// span name with U+202E reads backwards, "Trojan Source").
unsigned bidi_control_at(std::string_view text) {
  auto byte = [&](std::size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  if (byte(0) == 0xd8 && byte(1) == 0x9c) return 0x061c;
  if (byte(0) != 0xe2 || (byte(2) & 0xc0u) != 0x80) return 0;
  const unsigned point = 0x2000 | (byte(1) & 0x3fu) << 6 | (byte(2) & 0x3fu);
  const bool bidi = (byte(1) == 0x80 && (point == 0x200e || point == 0x200f || (point >= 0x202a && point <= 0x202e))) ||
                    (byte(1) == 0x81 && point >= 0x2066 && point <= 0x2069);
  return bidi ? point : 0;
}

// `text` with every control byte written as \xNN (but for newlines when `keep_newlines`) and every bidirectional
// formatting character as \uXXXX.
std::string escape_control_bytes(std::string_view text, bool keep_newlines) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (const unsigned point = c >= 0x80 ? bidi_control_at(text.substr(i)) : 0) {
      out += {'\\', 'u', kHex[point >> 12 & 15], kHex[point >> 8 & 15], kHex[point >> 4 & 15], kHex[point & 15]};
      i += point == 0x061c ? 1 : 2;
      continue;
    }
    if ((c >= 0x20 && c != 0x7f) || (keep_newlines && c == '\n')) {
      out += text[i];
      continue;
    }
    out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
  }
  return out;
}
}  // namespace

std::string printable_excerpt(std::string_view text, std::size_t max_bytes) {
  std::string out = escape_control_bytes(text.substr(0, max_bytes), false);
  if (text.size() > max_bytes) out += "...";
  return out;
}

std::string terminal_text(std::string_view text) { return escape_control_bytes(text, true); }

std::string redact_url(std::string_view url) {
  std::string out(url);
  std::size_t authority = out.find("://");
  authority = authority == std::string::npos ? 0 : authority + 3;
  std::size_t authority_end = out.find_first_of("/?#", authority);
  std::size_t at = out.rfind('@', authority_end == std::string::npos ? out.size() : authority_end);
  if (at != std::string::npos && at >= authority) {
    out.replace(authority, at - authority, "***");
  }
  if (std::size_t query = out.find('?'); query != std::string::npos) out.replace(query, std::string::npos, "?***");
  if (std::size_t fragment = out.find('#'); fragment != std::string::npos)
    out.replace(fragment, std::string::npos, "#***");
  return out;
}

}  // namespace lens::internal
