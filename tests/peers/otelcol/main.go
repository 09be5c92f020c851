// otelcol-lens: the OpenTelemetry Collector that lens's tests run as a real peer. It is the Collector's own
// service (go.opentelemetry.io/collector/otelcol) with just the components the tests configure: the OTLP
// receiver (gRPC and HTTP), the batch and memory-limiter processors, and the debug, file, Prometheus and OTLP
// exporters (the last forwards to Jaeger). Every module is pinned in go.mod/go.sum at one Collector release; scripts/setup-deps.sh builds it.
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{}
	if factories.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory()); err != nil {
		return factories, err
	}
	if factories.Processors, err = otelcol.MakeFactoryMap(batchprocessor.NewFactory(),
		memorylimiterprocessor.NewFactory()); err != nil {
		return factories, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap(debugexporter.NewFactory(), fileexporter.NewFactory(),
		prometheusexporter.NewFactory(), otlpexporter.NewFactory()); err != nil {
		return factories, err
	}
	factories.Telemetry = otelconftelemetry.NewFactory() // the Collector's own logs (and metrics, off in the tests)
	return factories, nil
}

func main() {
	info := component.BuildInfo{Command: "otelcol-lens", Description: "lens's test Collector", Version: "0.161.0"}
	// --config FILE: the tests write each Collector's configuration to a file of its own.
	providers := confmap.ResolverSettings{ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
		DefaultScheme: "file"}
	settings := otelcol.CollectorSettings{BuildInfo: info, Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: providers}}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
