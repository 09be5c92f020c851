#include "export/otlp_proto.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "export/otlp_walk.h"
#include "lens/internal/export.h"

namespace lens::internal {

namespace {

enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// The protobuf side of the walk. A nested message's length is written when the message ends:
//  - the outer frames of a request (depth < 3: the resource and scope lists, and what holds a whole batch)
//    reserve 5 bytes and keep a padded 5-byte varint, which every protobuf parser accepts, so no batch-sized
//    copy ever happens;
//  - every other message (a span, a key-value, a value: the many) reserves 1 byte, enough below 128 bytes of
//    content; a longer one moves its content up by the extra bytes (a span: once, by one byte).
class ProtoWriter {
 public:
  explicit ProtoWriter(std::string& out) : out_(out) {
    out_.resize(std::max<std::size_t>(out_.capacity(), 65536));  // written through a cursor, trimmed at the end
    base_ = out_.data();
    cur_ = base_;
    end_ = base_ + out_.size();
  }
  ~ProtoWriter() { out_.resize(static_cast<std::size_t>(cur_ - base_)); }

  LENS_ALWAYS_INLINE void begin(int field, std::string_view = {}) {
    char* p = reserve(16);
    p = put_tag(p, field, kLength);
    std::size_t length_bytes = depth_ < kPaddedDepth ? 5 : 1;
    p += length_bytes;
    cur_ = p;
    frames_[depth_++] = static_cast<std::size_t>(p - base_);
  }
  LENS_ALWAYS_INLINE void end() {
    std::size_t start = frames_[--depth_];
    std::size_t n = static_cast<std::size_t>(cur_ - base_) - start;
    if (depth_ < kPaddedDepth) {
      char* at = base_ + start - 5;
      for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(((n >> (7 * i)) & 0x7f) | 0x80);
      at[4] = static_cast<char>((n >> 28) & 0x7f);
      return;
    }
    if (n < 0x80) {
      base_[start - 1] = static_cast<char>(n);
      return;
    }
    char head[10];
    std::size_t k = static_cast<std::size_t>(put_varint(head, n) - head);
    reserve(k);
    char* at = base_ + start - 1;
    std::memmove(at + k, at + 1, n);
    std::memcpy(at, head, k);
    cur_ += k - 1;
  }
  void begin_list(int field, std::string_view = {}) { lists_[list_depth_++] = field; }
  void end_list() { --list_depth_; }
  LENS_ALWAYS_INLINE void item_begin() { begin(lists_[list_depth_ - 1]); }
  LENS_ALWAYS_INLINE void item_end() { end(); }

  // A KeyValue with a scalar value whose sizes are all known up front and small (the usual attribute): written
  // in one go with its one-byte lengths, no frames. False (nothing written) for anything else.
  LENS_ALWAYS_INLINE bool scalar_attribute(const AttributeView& a) {
    const int field = lists_[list_depth_ - 1];
    std::uint64_t word = 0;
    std::size_t value_size;  // the AnyValue's content
    switch (a.type) {
      case ValueType::kBool: value_size = 2; break;
      case ValueType::kInt: word = static_cast<std::uint64_t>(a.as_int()); value_size = 1 + varint_size(word); break;
      case ValueType::kDouble: value_size = 9; break;
      case ValueType::kString: value_size = 2 + a.value_bytes; break;
      default: return false;
    }
    const std::size_t key_size = a.key.size();
    const std::size_t kv_size = 2 + key_size + 2 + value_size;
    if (field >= 16 || key_size >= 0x80 || value_size >= 0x80 || kv_size >= 0x80) return false;
    char* p = reserve(kv_size + 2);
    *p++ = static_cast<char>((field << 3) | kLength);
    *p++ = static_cast<char>(kv_size);
    *p++ = 0x0a;  // KeyValue.key
    *p++ = static_cast<char>(key_size);
    copy(p, a.key.data(), key_size);
    p += key_size;
    *p++ = 0x12;  // KeyValue.value
    *p++ = static_cast<char>(value_size);
    switch (a.type) {
      case ValueType::kBool: *p++ = 0x10; *p++ = a.as_bool() ? 1 : 0; break;
      case ValueType::kInt: *p++ = 0x18; p = put_varint(p, word); break;
      case ValueType::kDouble: *p++ = 0x21; std::memcpy(p, a.value, 8); p += 8; break;
      default:
        *p++ = 0x0a;
        *p++ = static_cast<char>(a.value_bytes);
        copy(p, reinterpret_cast<const char*>(a.value), a.value_bytes);
        p += a.value_bytes;
    }
    cur_ = p;
    return true;
  }

  void string(int field, std::string_view, std::string_view v) { bytes(field, {}, v.data(), v.size()); }
  void bytes(int field, std::string_view, const void* data, std::size_t n) {
    char* p = reserve(n + 16);
    p = put_tag(p, field, kLength);
    p = put_varint(p, n);
    copy(p, static_cast<const char*>(data), n);
    cur_ = p + n;
  }
  void fixed64(int field, std::string_view, std::uint64_t v) { fixed(field, kFixed64, &v, 8); }
  void sfixed64(int field, std::string_view, std::int64_t v) { fixed(field, kFixed64, &v, 8); }
  void real(int field, std::string_view, double v) { fixed(field, kFixed64, &v, 8); }
  void fixed32(int field, std::string_view, std::uint32_t v) { fixed(field, kFixed32, &v, 4); }
  // int64: a negative value takes ten bytes, as protobuf writes it.
  void int64(int field, std::string_view, std::int64_t v) { varint_field(field, static_cast<std::uint64_t>(v)); }
  void uint32(int field, std::string_view, std::uint32_t v) { varint_field(field, v); }
  void enumeration(int field, std::string_view, int v) {
    varint_field(field, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  }
  void boolean(int field, std::string_view, bool v) { varint_field(field, v ? 1 : 0); }
  void packed_fixed64(int field, std::string_view, std::span<const std::uint64_t> values) { packed(field, values); }
  void packed_double(int field, std::string_view, std::span<const double> values) { packed(field, values); }

 private:
  static constexpr std::size_t kPaddedDepth = 3;

  // A packed repeated field of 8-byte values: their little-endian bytes as they lie in memory.
  template <typename T>
  void packed(int field, std::span<const T> values) {
    static_assert(sizeof(T) == 8);
    if (!values.empty()) bytes(field, {}, values.data(), 8 * values.size());
  }
  static std::size_t varint_size(std::uint64_t v) {
    return static_cast<std::size_t>(std::bit_width(v | 1) + 6) / 7;
  }
  static char* put_varint(char* p, std::uint64_t v) {
    while (v >= 0x80) {
      *p++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    return p;
  }
  static char* put_tag(char* p, int field, Wire wire) {
    return put_varint(p, (static_cast<std::uint64_t>(field) << 3) | wire);
  }
  void varint_field(int field, std::uint64_t v) {
    char* p = reserve(24);
    cur_ = put_varint(put_tag(p, field, kVarint), v);
  }
  void fixed(int field, Wire wire, const void* v, std::size_t n) {
    char* p = put_tag(reserve(16), field, wire);
    std::memcpy(p, v, n);  // n is 4 or 8: a single move once inlined
    cur_ = p + n;
  }
  // The cursor, with at least n writable bytes after it.
  char* reserve(std::size_t n) {
    if (__builtin_expect(static_cast<std::size_t>(end_ - cur_) < n, 0)) grow(n);
    return cur_;
  }
  __attribute__((noinline)) void grow(std::size_t n) {
    std::size_t used = static_cast<std::size_t>(cur_ - base_);
    out_.resize(std::max(2 * out_.size(), used + n + 65536));
    base_ = out_.data();
    cur_ = base_ + used;
    end_ = base_ + out_.size();
  }
  // Most fields are short (ids, keys, names): fixed-size moves instead of a call to memcpy.
  static void copy(char* to, const char* from, std::size_t n) {
    if (n > 64) {
      std::memcpy(to, from, n);
    } else if (n >= 16) {
      for (std::size_t i = 0; i + 16 < n; i += 16) std::memcpy(to + i, from + i, 16);
      std::memcpy(to + n - 16, from + n - 16, 16);
    } else if (n >= 8) {
      std::uint64_t a, b;
      std::memcpy(&a, from, 8);
      std::memcpy(&b, from + n - 8, 8);
      std::memcpy(to, &a, 8);
      std::memcpy(to + n - 8, &b, 8);
    } else if (n >= 4) {
      std::uint32_t a, b;
      std::memcpy(&a, from, 4);
      std::memcpy(&b, from + n - 4, 4);
      std::memcpy(to, &a, 4);
      std::memcpy(to + n - 4, &b, 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
    }
  }

  std::string& out_;
  char* base_;
  char* cur_;
  char* end_;
  // OTLP nests at most about ten messages deep; lens never writes arrays of arrays.
  static constexpr std::size_t kMaxDepth = 32;
  std::size_t frames_[kMaxDepth];  // offsets where each open message's content starts
  std::size_t depth_ = 0;
  int lists_[kMaxDepth];           // field numbers of the open repeated fields
  std::size_t list_depth_ = 0;
};

static_assert(std::endian::native == std::endian::little, "the protobuf writer copies little-endian values");

}  // namespace

void encode_traces_proto(const ExportBatch& batch, std::string& out) {
  ProtoWriter w(out);
  otlp::traces(w, batch);
}

void encode_metrics_proto(const MetricsBatch& batch, std::string& out) {
  ProtoWriter w(out);
  otlp::metrics(w, batch);
}

void encode_logs_proto(const LogsBatch& batch, std::string& out) {
  ProtoWriter w(out);
  otlp::logs(w, batch);
}

}  // namespace lens::internal
