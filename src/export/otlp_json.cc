#include "export/otlp_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

#include "common/json_escape.h"
#include "export/otlp_walk.h"

namespace lens::internal {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Two hex digits per byte value, so ids are written two characters at a time.
struct HexTable {
  char pairs[256][2];
  constexpr HexTable() : pairs() {
    for (int i = 0; i < 256; ++i) {
      pairs[i][0] = kHex[i >> 4];
      pairs[i][1] = kHex[i & 15];
    }
  }
};
constexpr HexTable kHexPairs;

// A JSON writer that appends to a reused string through a raw cursor: the string is grown ahead (rarely once
// it has reached a batch's size) and trimmed at the end, so each character costs a store, not a call.
class Json {
 public:
  explicit Json(std::string& out) : out_(out), len_(out.size()) {}
  ~Json() { out_.resize(len_); }

  Json& key(std::string_view k) {  // `,"k":` with the comma when needed
    char* p = room(k.size() + 4);
    if (!first_) *p++ = ',';
    *p++ = '"';
    std::memcpy(p, k.data(), k.size());
    p += k.size();
    *p++ = '"';
    *p++ = ':';
    done(p);
    first_ = true;  // the value follows, no comma before it
    return *this;
  }
  Json& open(char c) {
    char* p = room(2);
    if (!first_) *p++ = ',';
    *p++ = c;
    done(p);
    first_ = true;
    return *this;
  }
  Json& close(char c) {
    *room(1) = c;
    ++len_;
    first_ = false;
    return *this;
  }
  Json& string(std::string_view s) {
    char* p = room(3);
    if (!first_) *p++ = ',';
    *p++ = '"';
    done(p);
    escape(s);
    p = room(1);
    *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  Json& hex(const std::uint8_t* bytes, std::size_t n) {
    char* p = room(2 * n + 3);
    if (!first_) *p++ = ',';
    *p++ = '"';
    for (std::size_t i = 0; i < n; ++i, p += 2) std::memcpy(p, kHexPairs.pairs[bytes[i]], 2);
    *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  template <typename Int>
  Json& integer(Int v, bool quoted) {  // OTLP/JSON: 64-bit integers are strings
    char* p = room(24);
    if (!first_) *p++ = ',';
    if (quoted) *p++ = '"';
    p = std::to_chars(p, p + 21, v).ptr;
    if (quoted) *p++ = '"';
    done(p);
    first_ = false;
    return *this;
  }
  Json& u64_string(std::uint64_t v) { return integer(v, true); }
  Json& i64_string(std::int64_t v) { return integer(v, true); }
  Json& number(std::uint64_t v) { return integer(v, false); }
  Json& real(double v) {  // proto3 JSON: NaN and infinities as strings
    if (std::isnan(v)) return string("NaN");
    if (std::isinf(v)) return string(v > 0 ? "Infinity" : "-Infinity");
    char* p = room(34);
    if (!first_) *p++ = ',';
    p = std::to_chars(p, p + 32, v).ptr;
    done(p);
    first_ = false;
    return *this;
  }
  Json& boolean(bool v) {
    char* p = room(6);
    if (!first_) *p++ = ',';
    std::memcpy(p, v ? "true" : "false", v ? 4 : 5);
    done(p + (v ? 4 : 5));
    first_ = false;
    return *this;
  }

 private:
  // A cursor with at least n writable bytes.
  char* room(std::size_t n) {
    if (len_ + n > out_.size()) out_.resize(std::max(2 * out_.size(), len_ + n + 65536));
    return out_.data() + len_;
  }
  void done(char* p) { len_ = static_cast<std::size_t>(p - out_.data()); }

  // JSON string escaping (common/json_escape.h): invalid UTF-8 becomes U+FFFD so every line stays valid JSON.
  void escape(std::string_view s) { done(escape_json(s, room(max_escaped_size(s.size())))); }

  std::string& out_;
  std::size_t len_;
  bool first_ = true;
};

// The OTLP/JSON side of the walk in otlp_walk.h: field numbers are not needed, names are.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : j_(out) {}
  void open_request() { j_.open('{'); }
  void close_request() { j_.close('}'); }

  void begin(int, std::string_view name) { j_.key(name).open('{'); }
  void end() { j_.close('}'); }
  void begin_list(int, std::string_view name) { j_.key(name).open('['); }
  void end_list() { j_.close(']'); }
  void item_begin() { j_.open('{'); }
  void item_end() { j_.close('}'); }

  void string(int, std::string_view name, std::string_view v) { j_.key(name).string(v); }
  void bytes(int, std::string_view name, const std::uint8_t* data, std::size_t n) { j_.key(name).hex(data, n); }
  void fixed64(int, std::string_view name, std::uint64_t v) { j_.key(name).u64_string(v); }
  void sfixed64(int, std::string_view name, std::int64_t v) { j_.key(name).i64_string(v); }
  void int64(int, std::string_view name, std::int64_t v) { j_.key(name).i64_string(v); }
  void fixed32(int, std::string_view name, std::uint32_t v) { j_.key(name).number(v); }
  void uint32(int, std::string_view name, std::uint32_t v) { j_.key(name).number(v); }
  void enumeration(int, std::string_view name, int v) { j_.key(name).number(static_cast<std::uint64_t>(v)); }
  void boolean(int, std::string_view name, bool v) { j_.key(name).boolean(v); }
  void real(int, std::string_view name, double v) { j_.key(name).real(v); }
  void packed_fixed64(int, std::string_view name, std::span<const std::uint64_t> values) {
    j_.key(name).open('[');
    for (std::uint64_t v : values) j_.u64_string(v);
    j_.close(']');
  }
  void packed_double(int, std::string_view name, std::span<const double> values) {
    j_.key(name).open('[');
    for (double v : values) j_.real(v);
    j_.close(']');
  }

 private:
  Json j_;
};

template <typename Walk>
void encode(std::string& out, Walk&& walk) {
  JsonWriter w(out);
  w.open_request();
  walk(w);
  w.close_request();
}

}  // namespace

void encode_traces_json(const ExportBatch& batch, std::string& out) {
  encode(out, [&](JsonWriter& w) { otlp::traces(w, batch); });
}

void encode_metrics_json(const MetricsBatch& batch, std::string& out) {
  encode(out, [&](JsonWriter& w) { otlp::metrics(w, batch); });
}

void encode_logs_json(const LogsBatch& batch, std::string& out) {
  encode(out, [&](JsonWriter& w) { otlp::logs(w, batch); });
}

}  // namespace lens::internal
