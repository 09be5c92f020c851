#include "export/exporter_factory.h"

#include "export/json_lines_exporter.h"
#include "export/otlp_exporter.h"

namespace lens::internal {

std::unique_ptr<TelemetryExporter> make_exporter(const Config& config, const std::string& run_id, int rank,
                                                 SignalSet signals) {
  switch (config.exporter) {
    case Exporter::kConsole: return make_console_exporter();
    case Exporter::kFile: return make_file_exporter(telemetry_file_prefix(config, run_id, rank), signals);
    case Exporter::kOtlp: return make_otlp_exporter(config);
  }
  throw ConfigError("lens: unknown exporter");
}

}  // namespace lens::internal
