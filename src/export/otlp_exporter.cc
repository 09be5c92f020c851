#include "export/otlp_exporter.h"

#include "export/otlp_channel.h"
#include "export/otlp_http.h"
#include "export/otlp_json.h"
#include "export/otlp_proto.h"
#if defined(LENS_HAVE_GRPC)
#include "export/otlp_grpc.h"
#endif

namespace lens::internal {

namespace {

std::unique_ptr<OtlpChannel> make_channel(const OtlpSignalConfig& settings, const OtlpSignal& signal) {
  if (settings.protocol != OtlpProtocol::kGrpc) return make_otlp_http_channel(settings, signal);
#if defined(LENS_HAVE_GRPC)
  return make_otlp_grpc_channel(settings, signal);
#else
  throw ConfigError(std::string("lens: the OTLP protocol grpc (for ") + signal.name +
                    ") is not in this build of lens, which was built without gRPC; set OTEL_EXPORTER_OTLP_PROTOCOL "
                    "(or OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL) to http/protobuf (or http/json), or rebuild lens "
                    "with libgrpc++-dev installed");
#endif
}

class OtlpExporter final : public TelemetryExporter {
 public:
  explicit OtlpExporter(const Config& c)
      : traces_(make_channel(c.otlp_traces, kOtlpTraces)),
        metrics_(make_channel(c.otlp_metrics, kOtlpMetrics)),
        logs_(make_channel(c.otlp_logs, kOtlpLogs)) {}

  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    return send(*traces_, batch, batch.spans.size(), deadline, encode_traces_json, encode_traces_proto);
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    return send(*metrics_, batch, batch.metrics.size(), deadline, encode_metrics_json, encode_metrics_proto);
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    return send(*logs_, batch, batch.logs.size(), deadline, encode_logs_json, encode_logs_proto);
  }
  void shutdown() override {
    for (auto* channel : {traces_.get(), metrics_.get(), logs_.get()}) channel->close();
  }

 private:
  template <typename Batch, typename Json, typename Proto>
  ExportResult send(OtlpChannel& channel, const Batch& batch, std::size_t items, Deadline deadline, Json json,
                    Proto proto) {
    if (channel.json()) {
      text_.clear();
      json(batch, text_);
      return channel.send(text_, items, deadline);
    }
    proto(batch, wire_);
    return channel.send(wire_.view(), items, deadline);
  }

  std::unique_ptr<OtlpChannel> traces_, metrics_, logs_;
  // Reused: one request at a time, on the background thread.
  std::string text_;
  WireBuffer wire_;
};

}  // namespace

bool otlp_grpc_available() {
#if defined(LENS_HAVE_GRPC)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<TelemetryExporter> make_otlp_exporter(const Config& config) {
  return std::make_unique<OtlpExporter>(config);
}

}  // namespace lens::internal
