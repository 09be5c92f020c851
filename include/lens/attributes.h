// lens/attributes.h: attribute values, as spans, events and links carry them.
//
// An Attribute is a key and a value that does not own its data: it is read (and copied where it must be) at
// the call that receives it, so building one costs nothing. Values are bool, int64, double, string, and arrays
// of those (OpenTelemetry's AnyValue, less maps and bytes).
//
//   LENS_SPAN(lens::group::step, "train_step", {"iteration", it}, {"loss", 2.31}, {"phase", "warmup"});
//   span.set_attribute("layers", std::span<const std::int64_t>(ids));
//
// Keys and string values given as string literals are kept as pointers where lens can; other keys and values (a char
// buffer, a std::string, a const char*) are copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace lens {

namespace internal {
// Says a TextArg's text is a literal's, already measured: lens's own path from LENS_SPAN's call site
// (start_current_scope takes a literal name as a pointer and a length, in registers).
struct LiteralText {};

// The text in a char array: up to the first NUL, at most size - 1 bytes (an array larger than its text is not read
// past it). An array that ends with a NUL (every literal) is measured by strlen, which stops within it and which the
// compiler folds to a constant for a literal; a byte loop is not folded at real call sites and would run on every
// span name and attribute key.
constexpr std::size_t array_text_length(const char* text, std::size_t size) noexcept {
  if (text[size - 1] == '\0') return __builtin_strlen(text);
  std::size_t n = 0;
  while (n + 1 < size && text[n] != '\0') ++n;
  return n;
}

}  // namespace internal

// Text lens may keep. What is kept by pointer, never copied: a `const char` array, which is what a string
// literal is (it lives as long as the program). Pass a const array only if it has static storage too. Copied
// when the span, event or attribute is recorded: a writable `char` buffer (up to its first NUL: `snprintf(buf,
// ...)` then `LENS_SPAN(g, buf)` is safe), a std::string, a std::string_view. Attribute keys and span and event
// names are TextArgs.
class TextArg {
 public:
  template <std::size_t N>
  constexpr TextArg(const char (&literal)[N]) noexcept  // NOLINT
      : text_(literal, internal::array_text_length(literal, N)), is_static_(true) {}
  template <std::size_t N>
  constexpr TextArg(char (&buffer)[N]) noexcept  // NOLINT: a buffer on the stack, written at run time
      : text_(buffer, internal::array_text_length(buffer, N)), is_static_(false) {}
  TextArg(std::string_view text) noexcept : text_(text), is_static_(false) {}    // NOLINT
  TextArg(const std::string& text) noexcept : text_(text), is_static_(false) {}  // NOLINT
  constexpr TextArg(internal::LiteralText, std::string_view literal) noexcept : text_(literal), is_static_(true) {}

  constexpr std::string_view text() const noexcept { return text_; }
  constexpr bool is_static() const noexcept { return is_static_; }

 private:
  std::string_view text_;
  bool is_static_;
};

using AttributeKey = TextArg;

enum class ValueType : std::uint8_t {
  kBool = 1,
  kInt,
  kDouble,
  kString,
  kBoolArray,
  kIntArray,
  kDoubleArray,
  kStringArray,
};

class AttributeValue {
 public:
  constexpr AttributeValue(bool v) noexcept : type_(ValueType::kBool), b_(v) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  constexpr AttributeValue(T v) noexcept : type_(ValueType::kInt), i_(static_cast<std::int64_t>(v)) {}  // NOLINT
  constexpr AttributeValue(double v) noexcept : type_(ValueType::kDouble), d_(v) {}                     // NOLINT
  constexpr AttributeValue(float v) noexcept : type_(ValueType::kDouble), d_(v) {}                      // NOLINT
  constexpr AttributeValue(std::string_view v) noexcept : type_(ValueType::kString), s_(v) {}           // NOLINT
  AttributeValue(const std::string& v) noexcept : type_(ValueType::kString), s_(v) {}                   // NOLINT
  // A string literal: kept as a pointer where lens can (a LENS_SPAN's scope record), as TextArg keeps one. A writable
  // `char` buffer and a `const char*` are copied.
  template <std::size_t N>
  constexpr AttributeValue(const char (&literal)[N]) noexcept  // NOLINT
      : type_(ValueType::kString), is_static_(true), s_(literal, internal::array_text_length(literal, N)) {}
  template <std::size_t N>
  constexpr AttributeValue(char (&buffer)[N]) noexcept  // NOLINT
      : type_(ValueType::kString), s_(buffer, internal::array_text_length(buffer, N)) {}
  template <typename Pointer,
            std::enable_if_t<std::is_same_v<Pointer, const char*> || std::is_same_v<Pointer, char*>, int> = 0>
  constexpr AttributeValue(Pointer v) noexcept : type_(ValueType::kString), s_(v) {}                       // NOLINT
  constexpr AttributeValue(std::span<const bool> v) noexcept : type_(ValueType::kBoolArray), bools_(v) {}  // NOLINT
  constexpr AttributeValue(std::span<const std::int64_t> v) noexcept                                       // NOLINT
      : type_(ValueType::kIntArray), ints_(v) {}
  constexpr AttributeValue(std::span<const double> v) noexcept  // NOLINT
      : type_(ValueType::kDoubleArray), doubles_(v) {}
  constexpr AttributeValue(std::span<const std::string_view> v) noexcept  // NOLINT
      : type_(ValueType::kStringArray), strings_(v) {}

  constexpr ValueType type() const noexcept { return type_; }
  // A string value given as a literal (static storage: never copied where a pointer can be kept).
  constexpr bool is_static() const noexcept { return is_static_; }
  constexpr bool as_bool() const noexcept { return b_; }
  constexpr std::int64_t as_int() const noexcept { return i_; }
  constexpr double as_double() const noexcept { return d_; }
  constexpr std::string_view as_string() const noexcept { return s_; }
  constexpr std::span<const bool> as_bools() const noexcept { return bools_; }
  constexpr std::span<const std::int64_t> as_ints() const noexcept { return ints_; }
  constexpr std::span<const double> as_doubles() const noexcept { return doubles_; }
  constexpr std::span<const std::string_view> as_strings() const noexcept { return strings_; }

 private:
  ValueType type_;
  bool is_static_ = false;
  union {
    bool b_;
    std::int64_t i_;
    double d_;
    std::string_view s_;
    std::span<const bool> bools_;
    std::span<const std::int64_t> ints_;
    std::span<const double> doubles_;
    std::span<const std::string_view> strings_;
  };
};

struct Attribute {
  AttributeKey key;
  AttributeValue value;
};

namespace internal {
// The recording functions take attributes as a span: an initializer list at a call site (LENS_SPAN's), or an
// array built at run time (the Python package's).
inline std::span<const Attribute> as_span(std::initializer_list<Attribute> attributes) noexcept {
  return {attributes.begin(), attributes.size()};
}
}  // namespace internal

}  // namespace lens
