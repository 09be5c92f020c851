// OTLP protobuf encoding of the three export requests, written directly from lens's records by the walk of
// otlp_walk.h into a reused buffer: no libprotobuf, no per-span allocation. Field numbers are facts of the
// OpenTelemetry proto files; the bytes are checked by an independent decoder (protobufjs) in the tests.
#pragma once

#include <cstring>
#include <memory>
#include <string_view>

#include "signals/exporter.h"

namespace lens::internal {

// The bytes of the last request encoded into it, in storage kept from one request to the next and never
// zero-filled (a std::string clears every byte it grows by: as much work again as writing them).
class WireBuffer {
 public:
  std::string_view view() const noexcept { return {data_.get(), size_}; }

  // For the writer: the storage, at least `n` bytes, the first `keep` of them preserved.
  char* storage(std::size_t n, std::size_t keep) {
    if (n > capacity_) {
      std::unique_ptr<char[]> bigger(new char[n]);  // default-initialized: not zeroed
      if (keep > 0) std::memcpy(bigger.get(), data_.get(), keep);
      data_ = std::move(bigger);
      capacity_ = n;
    }
    return data_.get();
  }
  std::size_t capacity() const noexcept { return capacity_; }
  void set_size(std::size_t n) noexcept { size_ = n; }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0, capacity_ = 0;
};

// Encode the serialized ExportTraceServiceRequest / ExportMetricsServiceRequest / ExportLogsServiceRequest of
// the batch into `out` (replacing what it held); the bytes are out.view().
void encode_traces_proto(const ExportBatch& batch, WireBuffer& out);
void encode_metrics_proto(const MetricsBatch& batch, WireBuffer& out);
void encode_logs_proto(const LogsBatch& batch, WireBuffer& out);

}  // namespace lens::internal
