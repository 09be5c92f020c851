#include "export/sink_exporter.h"

#include <utility>

#include "export/otlp_json.h"

namespace lens::internal {
namespace {

class SinkExporter final : public TelemetryExporter {
 public:
  SinkExporter(std::unique_ptr<TelemetryExporter> inner, SpanBatchSink spans, JsonSink metrics)
      : inner_(std::move(inner)), spans_(std::move(spans)), metrics_(std::move(metrics)) {}

  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    if (!spans_) return inner_->export_spans(batch, deadline);
    return deliver([&] { return spans_(batch); });
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    if (!metrics_) return inner_->export_metrics(batch, deadline);
    json_.clear();
    encode_metrics_json(batch, json_);
    return deliver([&] { return metrics_(json_); });
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    return inner_->export_logs(batch, deadline);
  }
  void shutdown() override { inner_->shutdown(); }

 private:
  template <typename Call>
  static ExportResult deliver(Call&& call) noexcept {
    try {
      return call() ? ExportResult::kSuccess : ExportResult::kFailure;
    } catch (...) {  // the sink's failure is an export's failure, never the pipeline's
      return ExportResult::kFailure;
    }
  }

  std::unique_ptr<TelemetryExporter> inner_;
  SpanBatchSink spans_;
  JsonSink metrics_;
  std::string json_;
};

}  // namespace

SpanBatchSink span_json_sink(JsonSink json) {
  if (!json) return {};
  return [json = std::move(json), text = std::string()](const ExportBatch& batch) mutable {
    text.clear();
    encode_traces_json(batch, text);
    return json(text);
  };
}

std::unique_ptr<TelemetryExporter> make_sink_exporter(std::unique_ptr<TelemetryExporter> inner, SpanBatchSink spans,
                                                      JsonSink metrics) {
  return std::make_unique<SinkExporter>(std::move(inner), std::move(spans), std::move(metrics));
}

}  // namespace lens::internal
