// Carrying a span context across threads and processes: W3C Trace Context text and the binary form.
#include "lens/context.h"

#include <openssl/evp.h>

#include <cstring>

#include "common/text.h"

namespace lens {

namespace {

constexpr char kHex[] = "0123456789abcdef";

void put_hex(std::string& out, const std::uint8_t* bytes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
}

// Lower-case hex only, as W3C Trace Context requires.
int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool parse_hex(std::string_view text, std::uint8_t* out) noexcept {
  for (std::size_t i = 0; i < text.size() / 2; ++i) {
    int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

constexpr std::uint8_t kKnownFlags = SpanContext::kSampledFlag | SpanContext::kRandomFlag;

}  // namespace

std::string to_traceparent(const SpanContext& context) {
  std::string out = "00-";
  put_hex(out, context.trace_id.bytes.data(), 16);
  out += '-';
  put_hex(out, context.span_id.bytes.data(), 8);
  out += '-';
  std::uint8_t flags = context.trace_flags & kKnownFlags;
  put_hex(out, &flags, 1);
  return out;
}

std::optional<SpanContext> from_traceparent(std::string_view header) noexcept {
  header = internal::trim(header);
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55
  if (header.size() < 55 || header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;
  std::uint8_t version;
  if (!parse_hex(header.substr(0, 2), &version) || version == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append fields after a '-'.
  if (version == 0 ? header.size() != 55 : (header.size() > 55 && header[55] != '-')) return std::nullopt;
  SpanContext c;
  std::uint8_t flags;
  if (!parse_hex(header.substr(3, 32), c.trace_id.bytes.data()) ||
      !parse_hex(header.substr(36, 16), c.span_id.bytes.data()) || !parse_hex(header.substr(53, 2), &flags))
    return std::nullopt;
  if (!c.is_valid()) return std::nullopt;  // all-zero trace id or parent id
  c.trace_flags = flags & kKnownFlags;     // masked, never compared: unknown bits are ignored
  c.is_remote = true;
  return c;
}

std::string normalize_tracestate(std::string_view header) {
  std::string out;
  int members = 0;
  for (std::string_view raw : internal::split(header, ',')) {
    std::string_view member = internal::trim(raw);
    if (member.empty()) continue;
    std::size_t eq = member.find('=');
    if (eq == 0 || eq == std::string_view::npos || eq + 1 == member.size() || ++members > 32) return {};
    for (char c : member.substr(0, eq)) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/' || c == '@';
      if (!ok) return {};
    }
    for (char c : member.substr(eq + 1))
      if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return {};
    if (!out.empty()) out += ',';
    out.append(member);
  }
  return out;
}

BinaryContext to_binary(const SpanContext& context) noexcept {
  BinaryContext b{};
  b[0] = 0;  // version
  std::memcpy(b.data() + 1, context.trace_id.bytes.data(), 16);
  std::memcpy(b.data() + 17, context.span_id.bytes.data(), 8);
  b[25] = context.trace_flags & kKnownFlags;
  return b;
}

std::optional<SpanContext> from_binary(const BinaryContext& b) noexcept {
  if (b[0] != 0) return std::nullopt;
  SpanContext c;
  std::memcpy(c.trace_id.bytes.data(), b.data() + 1, 16);
  std::memcpy(c.span_id.bytes.data(), b.data() + 17, 8);
  c.trace_flags = b[25] & kKnownFlags;
  c.is_remote = true;
  if (!c.is_valid()) return std::nullopt;
  return c;
}

namespace {

// The first `n` bytes of SHA-256 of `text` into `out`; false (out untouched) when there is no memory.
bool sha256_prefix(const std::string& text, std::uint8_t* out, std::size_t n) noexcept {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1 || length < n) return false;
  std::memcpy(out, digest, n);
  return true;
}

}  // namespace

TraceId step_trace_id(std::string_view run_id, std::int64_t iteration) noexcept {
  TraceId id;  // all zero (invalid, so ignored by StartOptions) only when there is no memory
  try {
    std::string text = "lens.step/";
    text.append(run_id).append("/").append(std::to_string(iteration));
    sha256_prefix(text, id.bytes.data(), id.bytes.size());
  } catch (...) {
  }
  return id;
}

SpanId derived_span_id(const TraceId& trace, std::string_view key) noexcept {
  SpanId id;  // all zero (invalid, so ignored by StartOptions) only when there is no memory
  try {
    std::string text = "lens.span/";
    put_hex(text, trace.bytes.data(), trace.bytes.size());
    text.append("/").append(key);
    if (sha256_prefix(text, id.bytes.data(), id.bytes.size()) && !id.is_valid()) id.bytes.back() = 1;
  } catch (...) {
  }
  return id;
}

SpanId step_root_span_id(const TraceId& step_trace) noexcept { return derived_span_id(step_trace, "lens.step.root"); }

}  // namespace lens
