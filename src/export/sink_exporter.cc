#include "export/sink_exporter.h"

#include <utility>

#include "export/otlp_json.h"

namespace lens::internal {
namespace {

class SinkExporter final : public TelemetryExporter {
 public:
  SinkExporter(std::unique_ptr<TelemetryExporter> inner, JsonSink spans, JsonSink metrics)
      : inner_(std::move(inner)), spans_(std::move(spans)), metrics_(std::move(metrics)) {}

  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    if (!spans_) return inner_->export_spans(batch, deadline);
    json_.clear();
    encode_traces_json(batch, json_);
    return deliver(spans_);
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    if (!metrics_) return inner_->export_metrics(batch, deadline);
    json_.clear();
    encode_metrics_json(batch, json_);
    return deliver(metrics_);
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    return inner_->export_logs(batch, deadline);
  }
  void shutdown() override { inner_->shutdown(); }

 private:
  ExportResult deliver(const JsonSink& sink) noexcept {
    try {
      return sink(json_) ? ExportResult::kSuccess : ExportResult::kFailure;
    } catch (...) {  // the sink's failure is an export's failure, never the pipeline's
      return ExportResult::kFailure;
    }
  }

  std::unique_ptr<TelemetryExporter> inner_;
  JsonSink spans_, metrics_;
  std::string json_;
};

}  // namespace

std::unique_ptr<TelemetryExporter> make_sink_exporter(std::unique_ptr<TelemetryExporter> inner, JsonSink spans,
                                                      JsonSink metrics) {
  return std::make_unique<SinkExporter>(std::move(inner), std::move(spans), std::move(metrics));
}

}  // namespace lens::internal
