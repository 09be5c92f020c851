#include "export/otlp_proto.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "export/otlp_walk.h"
#include "lens/internal/visibility.h"

namespace lens::internal {

namespace {

enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// The protobuf side of the walk. A nested message's length is written when the message ends, into the bytes
// reserved for it when it began (length_bytes).
class ProtoWriter {
 public:
  explicit ProtoWriter(WireBuffer& out) : out_(out) {
    base_ = out_.storage(65536, 0);
    cur_ = base_;
    end_ = base_ + out_.capacity();
  }
  ~ProtoWriter() { out_.set_size(static_cast<std::size_t>(cur_ - base_)); }

  LENS_ALWAYS_INLINE void begin(int field, std::string_view = {}) {
    char* p = reserve(16);
    p = put_tag(p, field, kLength);
    p += length_bytes(depth_);
    cur_ = p;
    frames_[depth_++] = static_cast<std::size_t>(p - base_);
  }
  LENS_ALWAYS_INLINE void end() {
    std::size_t start = frames_[--depth_];
    std::size_t n = static_cast<std::size_t>(cur_ - base_) - start;
    char* at = base_ + start - length_bytes(depth_);
    switch (length_bytes(depth_)) {
      case 5:
        for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(((n >> (7 * i)) & 0x7f) | 0x80);
        at[4] = static_cast<char>((n >> 28) & 0x7f);
        return;
      case 2:
        if (n < 0x4000) {
          at[0] = static_cast<char>((n & 0x7f) | 0x80);
          at[1] = static_cast<char>(n >> 7);
          return;
        }
        break;
      default:
        if (n < 0x80) {
          at[0] = static_cast<char>(n);
          return;
        }
    }
    // Longer than its reserved length: move the content up.
    const std::size_t reserved = length_bytes(depth_);
    char head[10];
    std::size_t k = static_cast<std::size_t>(put_varint(head, n) - head);
    reserve(k);
    at = base_ + start - reserved;
    std::memmove(at + k, at + reserved, n);
    std::memcpy(at, head, k);
    cur_ += k - reserved;
  }
  LENS_ALWAYS_INLINE void begin_list(int field, std::string_view = {}) { lists_[list_depth_++] = field; }
  LENS_ALWAYS_INLINE void end_list() { --list_depth_; }
  LENS_ALWAYS_INLINE void item_begin() { begin(lists_[list_depth_ - 1]); }
  LENS_ALWAYS_INLINE void item_end() { end(); }

  // A KeyValue with a scalar value whose sizes are all known up front and small (the usual attribute): written
  // in one go with its one-byte lengths, no frames. False (nothing written) for anything else.
  LENS_ALWAYS_INLINE bool scalar_attribute(const AttributeView& a) {
    switch (a.type) {
      case ValueType::kBool:
        return scalar_key_value(a.key, 2, [&](char* p) {
          p[0] = 0x10;  // AnyValue.bool_value
          p[1] = a.as_bool() ? 1 : 0;
          return p + 2;
        });
      case ValueType::kInt: {
        const auto v = static_cast<std::uint64_t>(a.as_int());
        return scalar_key_value(a.key, 1 + varint_size(v), [&](char* p) {
          *p = 0x18;  // AnyValue.int_value
          return put_varint(p + 1, v);
        });
      }
      case ValueType::kDouble:
        return scalar_key_value(a.key, 9, [&](char* p) {
          *p = 0x21;  // AnyValue.double_value
          std::memcpy(p + 1, a.value, 8);
          return p + 9;
        });
      case ValueType::kString:
        return scalar_key_value(a.key, 2 + a.value_bytes, [&](char* p) {
          p[0] = 0x0a;  // AnyValue.string_value
          p[1] = static_cast<char>(a.value_bytes);
          copy(p + 2, reinterpret_cast<const char*>(a.value), a.value_bytes);
          return p + 2 + a.value_bytes;
        });
      default: return false;
    }
  }
  LENS_ALWAYS_INLINE void string(int field, std::string_view, std::string_view v) {
    bytes(field, {}, v.data(), v.size());
  }
  LENS_ALWAYS_INLINE void bytes(int field, std::string_view, const void* data, std::size_t n) {
    char* p = reserve(n + 16);
    p = put_tag(p, field, kLength);
    p = put_varint(p, n);
    copy(p, static_cast<const char*>(data), n);
    cur_ = p + n;
  }
  LENS_ALWAYS_INLINE void fixed64(int field, std::string_view, std::uint64_t v) { fixed(field, kFixed64, &v, 8); }
  LENS_ALWAYS_INLINE void sfixed64(int field, std::string_view, std::int64_t v) { fixed(field, kFixed64, &v, 8); }
  LENS_ALWAYS_INLINE void real(int field, std::string_view, double v) { fixed(field, kFixed64, &v, 8); }
  LENS_ALWAYS_INLINE void fixed32(int field, std::string_view, std::uint32_t v) { fixed(field, kFixed32, &v, 4); }
  // int64: a negative value takes ten bytes, as protobuf writes it.
  LENS_ALWAYS_INLINE void int64(int field, std::string_view, std::int64_t v) {
    varint_field(field, static_cast<std::uint64_t>(v));
  }
  LENS_ALWAYS_INLINE void uint32(int field, std::string_view, std::uint32_t v) { varint_field(field, v); }
  LENS_ALWAYS_INLINE void enumeration(int field, std::string_view, int v) {
    varint_field(field, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  }
  LENS_ALWAYS_INLINE void boolean(int field, std::string_view, bool v) { varint_field(field, v ? 1 : 0); }
  void packed_fixed64(int field, std::string_view, std::span<const std::uint64_t> values) { packed(field, values); }
  void packed_double(int field, std::string_view, std::span<const double> values) { packed(field, values); }

 private:
  // The bytes reserved for a message's length, by how deep it starts. The outer frames of a request (the
  // resource and scope lists, what holds a whole batch) keep a padded 5-byte varint, the items of a batch (a
  // span, a metric, a log record: a few hundred bytes) a padded 2-byte one, and the many small messages inside
  // them (key-values, values, events) one byte. Padded varints are valid protobuf; a message longer than its
  // reservation is moved up once. So no batch-sized copy ever happens.
  LENS_ALWAYS_INLINE static std::size_t length_bytes(std::size_t depth) { return kLengthBytes[depth]; }
  static constexpr std::uint8_t kLengthBytes[] = {5, 5, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

  // A packed repeated field of 8-byte values: their little-endian bytes as they lie in memory.
  template <typename T>
  void packed(int field, std::span<const T> values) {
    static_assert(sizeof(T) == 8);
    if (!values.empty()) bytes(field, {}, values.data(), 8 * values.size());
  }
  // Bytes of v as a varint: 7 bits a byte, by a table of the bit width (a division by 7 costs more).
  LENS_ALWAYS_INLINE static std::size_t varint_size(std::uint64_t v) {
    static constexpr auto kBytes = [] {
      std::array<std::uint8_t, 65> t{};
      for (int bits = 0; bits <= 64; ++bits) t[bits] = static_cast<std::uint8_t>(bits == 0 ? 1 : (bits + 6) / 7);
      return t;
    }();
    return kBytes[std::bit_width(v)];
  }
  // The KeyValue element of the current list: key, then an AnyValue of `value_size` bytes that `write_value`
  // writes (returning the end), when everything fits one-byte lengths.
  template <typename WriteValue>
  LENS_ALWAYS_INLINE bool scalar_key_value(std::string_view key, std::size_t value_size, WriteValue&& write_value) {
    const int field = lists_[list_depth_ - 1];
    const std::size_t kv_size = 2 + key.size() + 2 + value_size;
    if (field >= 16 || kv_size >= 0x80) return false;  // kv_size < 128: so are the key's and the value's
    char* p = reserve(kv_size + 2);
    p[0] = static_cast<char>((field << 3) | kLength);
    p[1] = static_cast<char>(kv_size);
    p[2] = 0x0a;  // KeyValue.key
    p[3] = static_cast<char>(key.size());
    copy(p + 4, key.data(), key.size());
    p += 4 + key.size();
    p[0] = 0x12;  // KeyValue.value
    p[1] = static_cast<char>(value_size);
    cur_ = write_value(p + 2);
    return true;
  }
  LENS_ALWAYS_INLINE static char* put_varint(char* p, std::uint64_t v) {
    while (v >= 0x80) {
      *p++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    return p;
  }
  LENS_ALWAYS_INLINE static char* put_tag(char* p, int field, Wire wire) {
    return put_varint(p, (static_cast<std::uint64_t>(field) << 3) | wire);
  }
  LENS_ALWAYS_INLINE void varint_field(int field, std::uint64_t v) {
    char* p = reserve(24);
    cur_ = put_varint(put_tag(p, field, kVarint), v);
  }
  LENS_ALWAYS_INLINE void fixed(int field, Wire wire, const void* v, std::size_t n) {
    char* p = put_tag(reserve(16), field, wire);
    std::memcpy(p, v, n);  // n is 4 or 8: a single move once inlined
    cur_ = p + n;
  }
  // The cursor, with at least n writable bytes after it.
  LENS_ALWAYS_INLINE char* reserve(std::size_t n) {
    if (__builtin_expect(static_cast<std::size_t>(end_ - cur_) < n, 0)) grow(n);
    return cur_;
  }
  __attribute__((noinline)) void grow(std::size_t n) {
    std::size_t used = static_cast<std::size_t>(cur_ - base_);
    base_ = out_.storage(std::max(2 * out_.capacity(), used + n + 65536), used);
    cur_ = base_ + used;
    end_ = base_ + out_.capacity();
  }
  // Most fields are short (ids, keys, names): fixed-size moves instead of a call to memcpy.
  LENS_ALWAYS_INLINE static void copy(char* to, const char* from, std::size_t n) {
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

  WireBuffer& out_;
  char* base_;
  char* cur_;
  char* end_;
  // OTLP nests at most about ten messages deep; lens never writes arrays of arrays.
  static constexpr std::size_t kMaxDepth = 32;
  static_assert(std::size(kLengthBytes) == kMaxDepth);
  std::size_t frames_[kMaxDepth];  // offsets where each open message's content starts
  std::size_t depth_ = 0;
  int lists_[kMaxDepth];  // field numbers of the open repeated fields
  std::size_t list_depth_ = 0;
};

static_assert(std::endian::native == std::endian::little, "the protobuf writer copies little-endian values");

}  // namespace

void encode_traces_proto(const ExportBatch& batch, WireBuffer& out) {
  ProtoWriter w(out);
  otlp::traces(w, batch);
}

void encode_metrics_proto(const MetricsBatch& batch, WireBuffer& out) {
  ProtoWriter w(out);
  otlp::metrics(w, batch);
}

void encode_logs_proto(const LogsBatch& batch, WireBuffer& out) {
  ProtoWriter w(out);
  otlp::logs(w, batch);
}

}  // namespace lens::internal
