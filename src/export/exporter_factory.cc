#include "export/exporter_factory.h"

#include <array>
#include <utility>
#include <vector>

#include "export/json_lines_exporter.h"
#include "export/otlp_exporter.h"

namespace lens::internal {

namespace {

// Each signal to the exporter of its kind (null: not exported here).
class SignalRouter final : public TelemetryExporter {
 public:
  void add(std::unique_ptr<TelemetryExporter> exporter, SignalSet signals) {
    for (std::size_t i = 0; i < signals.size(); ++i)
      if (signals[i]) by_signal_[i] = exporter.get();
    owned_.push_back(std::move(exporter));
  }
  ExportResult export_spans(const ExportBatch& batch, Deadline deadline) override {
    TelemetryExporter* e = by_signal_[static_cast<std::size_t>(Signal::kTraces)];
    return e ? e->export_spans(batch, deadline) : ExportResult::kSuccess;
  }
  ExportResult export_metrics(const MetricsBatch& batch, Deadline deadline) override {
    TelemetryExporter* e = by_signal_[static_cast<std::size_t>(Signal::kMetrics)];
    return e ? e->export_metrics(batch, deadline) : ExportResult::kSuccess;
  }
  ExportResult export_logs(const LogsBatch& batch, Deadline deadline) override {
    TelemetryExporter* e = by_signal_[static_cast<std::size_t>(Signal::kLogs)];
    return e ? e->export_logs(batch, deadline) : ExportResult::kSuccess;
  }
  void shutdown() override {
    for (auto& e : owned_) e->shutdown();
  }

 private:
  std::array<TelemetryExporter*, 3> by_signal_{};
  std::vector<std::unique_ptr<TelemetryExporter>> owned_;
};

std::unique_ptr<TelemetryExporter> make_one(Exporter kind, const Config& config, const std::string& run_id, int rank,
                                            SignalSet signals) {
  switch (kind) {
    case Exporter::kConsole: return make_console_exporter();
    case Exporter::kFile: return make_file_exporter(telemetry_file_prefix(config, run_id, rank), signals);
    case Exporter::kOtlp: return make_otlp_exporter(config);
  }
  throw ConfigError("lens: unknown exporter");
}

// Where `signal` goes: EXPORTER, unless its OTEL_<SIGNAL>_EXPORTER says otherwise (otlp or console).
Exporter exporter_for(const Config& config, Signal signal) {
  const SignalExporter chosen = signal == Signal::kTraces    ? config.traces_exporter
                                : signal == Signal::kMetrics ? config.metrics_exporter
                                                             : config.logs_exporter;
  switch (chosen) {
    case SignalExporter::kOtlp: return Exporter::kOtlp;
    case SignalExporter::kConsole: return Exporter::kConsole;
    default: return config.exporter;  // kFollow (kNone and kPrometheus never reach an exporter)
  }
}

}  // namespace

std::unique_ptr<TelemetryExporter> make_exporter(const Config& config, const std::string& run_id, int rank,
                                                 SignalSet signals) {
  // The signals of each kind, so that one kind is one exporter (one file set, one set of connections).
  std::array<SignalSet, 3> by_kind{};  // indexed by Exporter
  for (Signal s : {Signal::kTraces, Signal::kMetrics, Signal::kLogs})
    if (signals[static_cast<std::size_t>(s)])
      by_kind[static_cast<std::size_t>(exporter_for(config, s))][static_cast<std::size_t>(s)] = true;
  std::vector<Exporter> kinds;
  for (Exporter kind : {Exporter::kOtlp, Exporter::kConsole, Exporter::kFile}) {
    const SignalSet& set = by_kind[static_cast<std::size_t>(kind)];
    if (set[0] || set[1] || set[2]) kinds.push_back(kind);
  }
  // No signal for any of them (each has a consumer's sink, or is off): nothing is opened, not even a connection.
  if (kinds.empty()) return std::make_unique<SignalRouter>();
  if (kinds.size() == 1) return make_one(kinds.front(), config, run_id, rank, signals);
  auto router = std::make_unique<SignalRouter>();
  for (Exporter kind : kinds) {
    const SignalSet& set = by_kind[static_cast<std::size_t>(kind)];
    router->add(make_one(kind, config, run_id, rank, set), set);
  }
  return router;
}

}  // namespace lens::internal
