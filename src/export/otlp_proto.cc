#include "export/otlp_proto.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "export/otlp_walk.h"

namespace lens::internal {

namespace {

enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// The protobuf side of the walk. Nested messages get their length written back when they end: 5 bytes are
// reserved, and the content is moved down when its length needs fewer (small messages, the many); a large
// message (a whole batch) keeps a padded 5-byte length instead, which every protobuf parser accepts, so no
// batch-sized copy happens.
class ProtoWriter {
 public:
  explicit ProtoWriter(std::string& out) : out_(out) {
    out_.clear();
    frames_.reserve(16);
    lists_.reserve(16);
  }
  ~ProtoWriter() { out_.resize(len_); }

  void begin(int field, std::string_view = {}) {
    tag(field, kLength);
    room(5);
    len_ += 5;
    frames_.push_back(len_);
  }
  void end() {
    std::size_t start = frames_.back();
    frames_.pop_back();
    std::size_t n = len_ - start;
    char* at = out_.data() + start - 5;
    if (n >= kPadAbove) {
      for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(((n >> (7 * i)) & 0x7f) | 0x80);
      at[4] = static_cast<char>((n >> 28) & 0x7f);
      return;
    }
    char head[5];
    std::size_t k = put_varint(head, n);
    std::memcpy(at, head, k);
    if (k < 5) std::memmove(at + k, at + 5, n);
    len_ -= 5 - k;
  }
  void begin_list(int field, std::string_view = {}) { lists_.push_back(field); }
  void end_list() { lists_.pop_back(); }
  void item_begin() { begin(lists_.back()); }
  void item_end() { end(); }

  void string(int field, std::string_view, std::string_view v) { bytes(field, {}, v.data(), v.size()); }
  void bytes(int field, std::string_view, const void* data, std::size_t n) {
    tag(field, kLength);
    varint(n);
    room(n);
    std::memcpy(out_.data() + len_, data, n);
    len_ += n;
  }
  void fixed64(int field, std::string_view, std::uint64_t v) {
    tag(field, kFixed64);
    raw(&v, 8);
  }
  void sfixed64(int field, std::string_view, std::int64_t v) {
    tag(field, kFixed64);
    raw(&v, 8);
  }
  void int64(int field, std::string_view, std::int64_t v) {
    tag(field, kVarint);
    varint(static_cast<std::uint64_t>(v));  // negative: ten bytes, as protobuf writes int64
  }
  void fixed32(int field, std::string_view, std::uint32_t v) {
    tag(field, kFixed32);
    raw(&v, 4);
  }
  void uint32(int field, std::string_view, std::uint32_t v) {
    tag(field, kVarint);
    varint(v);
  }
  void enumeration(int field, std::string_view, int v) {
    tag(field, kVarint);
    varint(static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  }
  void boolean(int field, std::string_view, bool v) {
    tag(field, kVarint);
    varint(v ? 1 : 0);
  }
  void real(int field, std::string_view, double v) {
    tag(field, kFixed64);
    raw(&v, 8);
  }
  void packed_fixed64(int field, std::string_view, std::span<const std::uint64_t> values) {
    if (values.empty()) return;
    tag(field, kLength);
    varint(8 * values.size());
    raw(values.data(), 8 * values.size());
  }
  void packed_double(int field, std::string_view, std::span<const double> values) {
    if (values.empty()) return;
    tag(field, kLength);
    varint(8 * values.size());
    raw(values.data(), 8 * values.size());
  }

 private:
  static constexpr std::size_t kPadAbove = 4096;

  static std::size_t put_varint(char* at, std::uint64_t v) {
    std::size_t k = 0;
    while (v >= 0x80) {
      at[k++] = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    at[k++] = static_cast<char>(v);
    return k;
  }
  void room(std::size_t n) {
    if (len_ + n > out_.size()) out_.resize(std::max(2 * out_.size(), len_ + n + 65536));
  }
  void varint(std::uint64_t v) {
    room(10);
    len_ += put_varint(out_.data() + len_, v);
  }
  void tag(int field, Wire wire) { varint((static_cast<std::uint64_t>(field) << 3) | wire); }
  void raw(const void* data, std::size_t n) {  // little-endian on the machines lens runs on (x86-64, arm64)
    room(n);
    std::memcpy(out_.data() + len_, data, n);
    len_ += n;
  }

  std::string& out_;
  std::size_t len_ = 0;
  std::vector<std::size_t> frames_;
  std::vector<int> lists_;
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
