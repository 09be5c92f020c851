// An exporter for tests: keeps every exported request as OTLP/JSON text, can fail on demand or hang until
// released, so tests can drive the pipeline's failure paths with the real encoder.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#include "signals/exporter.h"
#include "trace/record.h"

namespace lens::internal {

class MemoryExporter final : public TelemetryExporter {
 public:
  struct Shared {
    std::mutex mutex;  // guards every field below
    std::condition_variable released_cv;
    std::vector<std::string> requests;  // one OTLP/JSON request per span batch
    std::vector<std::string> metrics;   // ... per metric collection
    std::vector<std::string> logs;      // ... per log batch
    // The same batches in OTLP protobuf, for decoding by an independent decoder.
    std::vector<std::string> span_protos, metric_protos, log_protos;
    std::size_t spans = 0;
    // The time left to each signal's last export when it was called: what its deadline allowed.
    std::chrono::milliseconds span_budget{0}, metric_budget{0}, log_budget{0};
    bool fail = false;  // answer every batch with a failure
    bool hang = false;  // block in export until release()
    bool shut_down = false;
    void release() {
      std::lock_guard lock(mutex);
      hang = false;
      released_cv.notify_all();
    }
  };

  explicit MemoryExporter(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    note_budget(&Shared::span_budget, deadline);
    ExportResult r =
        keep(batch, encode_traces_json, encode_traces_proto, &Shared::requests, &Shared::span_protos, true);
    if (r == ExportResult::kSuccess) {
      std::lock_guard lock(shared_->mutex);
      shared_->spans += batch.spans.size();
    }
    return r;
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    note_budget(&Shared::metric_budget, deadline);
    return keep(batch, encode_metrics_json, encode_metrics_proto, &Shared::metrics, &Shared::metric_protos, false);
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    note_budget(&Shared::log_budget, deadline);
    return keep(batch, encode_logs_json, encode_logs_proto, &Shared::logs, &Shared::log_protos, true);
  }
  void shutdown() override {
    std::lock_guard lock(shared_->mutex);
    shared_->shut_down = true;
  }

 private:
  using Texts = std::vector<std::string> Shared::*;

  void note_budget(std::chrono::milliseconds Shared::*budget, Deadline deadline) {
    std::lock_guard lock(shared_->mutex);
    (*shared_).*budget =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  }

  // Encodes the batch both ways and keeps both, unless told to fail; waits while told to hang (ignoring the
  // deadline, like a hung peer) when `may_hang`.
  template <typename Batch, typename Json, typename Proto>
  ExportResult keep(const Batch& batch, Json json_encoder, Proto proto_encoder, Texts jsons, Texts protos,
                    bool may_hang) {
    std::string json;
    json_encoder(batch, json);
    json.shrink_to_fit();  // the encoder reserves room for a large batch; a test keeps thousands of these
    WireBuffer wire;
    proto_encoder(batch, wire);
    std::string proto(wire.view());
    std::unique_lock lock(shared_->mutex);
    if (may_hang) shared_->released_cv.wait(lock, [&] { return !shared_->hang; });
    if (shared_->fail) return ExportResult::kFailure;
    ((*shared_).*jsons).push_back(std::move(json));
    ((*shared_).*protos).push_back(std::move(proto));
    return ExportResult::kSuccess;
  }

  std::shared_ptr<Shared> shared_;
};

}  // namespace lens::internal
