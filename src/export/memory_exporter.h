// An exporter for tests: keeps every exported request as OTLP/JSON text, can fail on demand or hang until
// released, so tests can drive the pipeline's failure paths with the real encoder.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "export/exporter.h"
#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#include "trace/record.h"

namespace lens::internal {

class MemoryExporter final : public TelemetryExporter {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable released_cv;
    std::vector<std::string> requests;  // one OTLP/JSON request per span batch
    std::vector<std::string> metrics;   // ... per metric collection
    std::vector<std::string> logs;      // ... per log batch
    // The same batches in OTLP protobuf, for decoding by an independent decoder.
    std::vector<std::string> span_protos, metric_protos, log_protos;
    std::size_t spans = 0;
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

  ExportResult export_spans(const ExportBatch& batch, Deadline) override {
    std::string json, proto;
    encode_traces_json(batch, json);
    encode_traces_proto(batch, proto);
    std::unique_lock lock(shared_->mutex);
    shared_->released_cv.wait(lock, [&] { return !shared_->hang; });  // ignores the deadline, like a hung peer
    if (shared_->fail) return ExportResult::kFailure;
    shared_->requests.push_back(std::move(json));
    shared_->span_protos.push_back(std::move(proto));
    shared_->spans += batch.spans.size();
    return ExportResult::kSuccess;
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline) override {
    std::string json, proto;
    encode_metrics_json(batch, json);
    encode_metrics_proto(batch, proto);
    std::lock_guard lock(shared_->mutex);
    if (shared_->fail) return ExportResult::kFailure;
    shared_->metrics.push_back(std::move(json));
    shared_->metric_protos.push_back(std::move(proto));
    return ExportResult::kSuccess;
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline) override {
    std::string json, proto;
    encode_logs_json(batch, json);
    encode_logs_proto(batch, proto);
    std::unique_lock lock(shared_->mutex);
    shared_->released_cv.wait(lock, [&] { return !shared_->hang; });
    if (shared_->fail) return ExportResult::kFailure;
    shared_->logs.push_back(std::move(json));
    shared_->log_protos.push_back(std::move(proto));
    return ExportResult::kSuccess;
  }
  void shutdown() override {
    std::lock_guard lock(shared_->mutex);
    shared_->shut_down = true;
  }

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace lens::internal
