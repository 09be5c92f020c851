// A seeded generator over every parser that reads text from outside: configuration variables, OTLP headers,
// traceparent/tracestate, the binary context, the worker bootstrap, run ids as directory names, and the text
// helpers. Random and mutated inputs (control bytes, %-escapes, huge numbers, unicode) must give a value or a
// ConfigError, never another exception, a crash or (under ASan+UBSan, where the core tests also run) undefined
// behaviour. Fixed seed and iteration count: the same inputs every run, a bounded time in CI.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/text.h"
#include "config/env.h"
#include "export/exporters.h"
#include "export/otlp_channel.h"
#include "lens/context.h"
#include "lens/megatron.h"
#include "lens/worker.h"

namespace lens {
namespace {

class Inputs {
 public:
  explicit Inputs(std::uint32_t seed) : random_(seed) {}

  // A random string, or a valid seed with a few bytes replaced, inserted or cut.
  std::string next(const std::vector<std::string>& seeds) {
    std::string s = pick(2) == 0 ? random_text() : seeds[pick(seeds.size())];
    for (std::size_t edits = pick(4); edits > 0 && !s.empty(); --edits) {
      std::size_t at = pick(s.size());
      switch (pick(3)) {
        case 0: s[at] = byte(); break;
        case 1: s.insert(at, 1, byte()); break;
        default: s.erase(at, pick(s.size() - at) + 1);
      }
    }
    return s;
  }
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(random_); }

 private:
  char byte() {
    static const std::string kInteresting = "%=,;:-_.0123456789abcdefABCDEF \t\r\n\x1b\x7f\xc3\xa9\xff/\\\"'+";
    return pick(4) == 0 ? static_cast<char>(pick(256)) : kInteresting[pick(kInteresting.size())];
  }
  std::string random_text() {
    static const std::vector<std::string> kPieces = {"99999999999999999999", "-1", "9223372036854775807", "0x10",
                                                     "nan", "inf", "1e309", "%", "%0", "%zz", "%0d%0a", "=", ","};
    std::string s;
    for (std::size_t n = pick(12); n > 0; --n) s += pick(3) == 0 ? kPieces[pick(kPieces.size())] : std::string(1, byte());
    return s;
  }
  std::mt19937 random_;
};

// Runs `parse` on the input: a ConfigError is an answer, anything else thrown fails the test.
template <typename Parse>
void expect_value_or_config_error(const std::string& input, Parse&& parse) {
  try {
    parse(input);
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << e.what() << " for input of " << input.size() << " bytes: "
                  << internal::printable_excerpt(input);
  }
}

constexpr int kIterations = 20000;

TEST(ParsersFuzz, ConfigurationVariables) {
  const std::vector<std::string> variables = {
      "MEGATRON_OTEL_ENABLED", "MEGATRON_OTEL_SPAN_GROUPS", "MEGATRON_OTEL_RANK_STRATEGY", "MEGATRON_OTEL_EXPORT_RANK",
      "MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "MEGATRON_OTEL_SAMPLING_STRATEGY", "MEGATRON_OTEL_EXPORTER",
      "NEMO_LENS_TRACES_ENABLED", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_BSP_SCHEDULE_DELAY",
      "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BLRP_EXPORT_TIMEOUT",
      "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS",
      "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_COMPRESSION",
      "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_PROMETHEUS_PORT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
      "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"};
  const std::vector<std::string> seeds = {"1", "all,-layer", "per_step", "all_ranks", "0.5", "5000", "grpc",
                                          "authorization=Bearer%20x,k=v", "traceidratio", "gzip", "9464"};
  Inputs inputs(20261130);
  for (int i = 0; i < kIterations; ++i) {
    std::map<std::string, std::string> env = {{variables[inputs.pick(variables.size())], inputs.next(seeds)},
                                              {"OTEL_TRACES_SAMPLER_ARG", inputs.next(seeds)}};
    expect_value_or_config_error(env.begin()->second, [&](const std::string&) {
      internal::config_from(
          [&](const std::string& name) -> std::optional<std::string> {
            auto it = env.find(name);
            return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
          },
          "MEGATRON_OTEL", "NEMO_LENS", "megatron-lm", megatron::catalogue());
    });
  }
}

TEST(ParsersFuzz, OtlpHeadersForBothTransports) {
  Inputs inputs(1);
  const std::vector<std::string> seeds = {"authorization=Bearer%20TOKEN", "a=b,c=d", "x-bin=%00%0d%0a"};
  for (int i = 0; i < kIterations; ++i) {
    std::string text = inputs.next(seeds);
    expect_value_or_config_error(text, [&](const std::string& t) {
      OtlpSignalConfig settings;
      settings.headers = internal::parse_headers(internal::EnvValue{t, "OTEL_EXPORTER_OTLP_HEADERS", true});
      for (OtlpProtocol p : {OtlpProtocol::kGrpc, OtlpProtocol::kHttpProtobuf}) {
        settings.protocol = p;
        internal::check_otlp_headers(settings, internal::kOtlpTraces);
      }
    });
  }
}

TEST(ParsersFuzz, TraceContextAndRunIdsAndTextHelpers) {
  Inputs inputs(2);
  const std::vector<std::string> seeds = {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
                                          "vendor=value,other=x", "https://user:pw@host:4318/v1/traces?key=1"};
  for (int i = 0; i < kIterations; ++i) {
    std::string text = inputs.next(seeds);
    if (auto context = from_traceparent(text)) {
      EXPECT_TRUE(context->is_valid()) << text;
    }
    (void)normalize_tracestate(text);
    (void)internal::percent_decode(text);
    (void)internal::redact_url(text);
    EXPECT_LE(internal::printable_excerpt(text).size(), 256u * 4 + 3);
    BinaryContext binary{};
    for (std::size_t b = 0; b < binary.size(); ++b) binary[b] = static_cast<std::uint8_t>(text.empty() ? b : text[b % text.size()]);
    if (auto context = from_binary(binary)) {
      EXPECT_TRUE(context->is_valid());
    }
    expect_value_or_config_error(text, [](const std::string& t) {
      std::string name = internal::run_directory_name(t);
      EXPECT_EQ(name.find('/'), std::string::npos);
      EXPECT_NE(name, "..");
      EXPECT_NE(name, ".");
    });
  }
}

TEST(ParsersFuzz, WorkerBootstrap) {
  WorkerBootstrap valid;
  valid.run_id = "run-1";
  valid.rank = 3;
  const std::vector<std::string> seeds = {valid.serialize()};
  Inputs inputs(3);
  for (int i = 0; i < kIterations; ++i) {
    expect_value_or_config_error(inputs.next(seeds), [](const std::string& t) { (void)WorkerBootstrap::parse(t); });
  }
}

}  // namespace
}  // namespace lens
