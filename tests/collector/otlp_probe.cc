// A process that sends a known set of spans, metric points and log records over OTLP, for the tests against real
// peers (the OpenTelemetry Collector, Jaeger). Telemetry comes from the environment (MEGATRON_OTEL_*, OTEL_*),
// so each test picks protocol, endpoint, compression and TLS.
//
//   otlp_probe REFERENCE ITERATIONS [PAUSE_MS [SHUTDOWN_MS]]
//
// Every span it records is written to REFERENCE as one JSON object a line (name, ids, parent, links, attributes):
// what the peer must hold, span by span. Each iteration is a step span with a forward-backward child (linked to
// the step before) and two micro-batch grandchildren; a counter, a histogram and a log record go with it. The
// last line of stdout is the stats as JSON: what lens counted as exported and dropped. SHUTDOWN_MS (default 5000,
// lens's own) bounds the shutdown: a test of retries gives it longer, so that its outcome does not hang on how
// fast a peer starts.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lens/log.h"
#include "lens/megatron.h"
#include "lens/metrics.h"
#include "lens/telemetry.h"

namespace mg = lens::megatron::group;

namespace {

std::string hex_ids(const lens::SpanContext& context) {      // "<trace id> <span id>" from the traceparent
  const std::string header = lens::to_traceparent(context);  // 00-<32 hex>-<16 hex>-<2 hex>
  return header.substr(3, 32) + "\", \"" + header.substr(36, 16);
}

void write_span(std::FILE* out, const char* name, const lens::SpanContext& self, const lens::SpanContext* parent,
                const lens::SpanContext* link, const std::string& attributes) {
  std::fprintf(out,
               "{\"name\": \"%s\", \"ids\": [\"%s\"], \"parent\": \"%s\", \"links\": [%s], \"attributes\": {%s}}\n",
               name, hex_ids(self).c_str(), parent ? hex_ids(*parent).substr(36).c_str() : "",
               link ? ("[\"" + hex_ids(*link) + "\"]").c_str() : "", attributes.c_str());
}

std::string exact(double v) {  // every digit, so that the peer's double compares equal
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: otlp_probe REFERENCE ITERATIONS [PAUSE_MS [SHUTDOWN_MS]]\n");
    return 2;
  }
  std::FILE* reference = std::fopen(argv[1], "w");
  if (!reference) {
    std::perror(argv[1]);
    return 2;
  }
  const int iterations = std::atoi(argv[2]);
  const int pause_ms = argc > 3 ? std::atoi(argv[3]) : 0;
  const std::chrono::milliseconds shutdown_timeout =
      argc > 4 ? std::chrono::milliseconds(std::atoi(argv[4])) : lens::kDefaultShutdownTimeout;
  try {
    lens::Telemetry telemetry = lens::setup_telemetry(lens::megatron::config_from_env(), {.rank = 0, .world_size = 1});
    auto steps = lens::metrics::counter<std::int64_t>("probe.steps", {.description = "Steps run.", .unit = "{step}"});
    auto seconds = lens::metrics::histogram<double>("probe.step_time", {.unit = "s"});
    lens::SpanContext previous{};
    for (int it = 0; it < iterations; ++it) {
      // A light scope with packed attributes, one of each kind (lens/internal/scope_attributes.h); `fb` below is one
      // too, until add_link moves it to a slot.
      LENS_SPAN_NAMED(step, mg::step, "megatron.train_step", {"megatron.iteration", it},
                      {"megatron.loss", 2.5 - it * 0.01}, {"probe.phase", "warmup"}, {"probe.ok", it % 2 == 0});
      const lens::SpanContext step_context = step.context();
      write_span(reference, "megatron.train_step", step_context, nullptr, nullptr,
                 "\"megatron.iteration\": " + std::to_string(it) + ", \"megatron.loss\": " + exact(2.5 - it * 0.01) +
                     ", \"probe.phase\": \"warmup\", \"probe.ok\": " + (it % 2 == 0 ? "true" : "false"));
      {
        LENS_SPAN_NAMED(fb, mg::forward_backward, "megatron.forward_backward", {"megatron.num_microbatches", 2});
        if (previous.is_valid()) fb.add_link(previous, {{"probe.link", "previous step"}});
        write_span(reference, "megatron.forward_backward", fb.context(), &step_context,
                   previous.is_valid() ? &previous : nullptr, "\"megatron.num_microbatches\": 2");
        const lens::SpanContext fb_context = fb.context();
        for (int mb = 0; mb < 2; ++mb) {
          LENS_SPAN_NAMED(micro, mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", mb});
          write_span(reference, "megatron.microbatch.forward", micro.context(), &fb_context, nullptr,
                     "\"megatron.microbatch_id\": " + std::to_string(mb));
          const lens::SpanContext micro_context = micro.context();
          // A light scope without attributes (a 64-byte scope record, src/trace/scope_record.h).
          LENS_SPAN(mg::layer, "megatron.layer.forward");
          write_span(reference, "megatron.layer.forward", lens::current_context(), &micro_context, nullptr, "");
        }
      }
      steps.add(1);
      seconds.record(0.25 + it * 0.001);
      lens::log(lens::Severity::kInfo, "probe step done", {{"megatron.iteration", it}});
      previous = step_context;
      if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
    std::fclose(reference);
    telemetry.shutdown(shutdown_timeout);
    const lens::SpanStats s = telemetry.span_stats();
    const lens::LogStats l = telemetry.log_stats();
    std::printf(
        "{\"spans\": {\"produced\": %llu, \"exported\": %llu, \"dropped\": %llu, \"export_failures\": %llu}, "
        "\"logs\": {\"produced\": %llu, \"exported\": %llu, \"dropped\": %llu}}\n",
        static_cast<unsigned long long>(s.produced), static_cast<unsigned long long>(s.exported),
        static_cast<unsigned long long>(s.dropped()), static_cast<unsigned long long>(s.export_failures),
        static_cast<unsigned long long>(l.produced), static_cast<unsigned long long>(l.exported),
        static_cast<unsigned long long>(l.dropped()));
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
