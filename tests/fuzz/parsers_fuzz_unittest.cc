// A seeded generator over every parser that reads text from outside: configuration variables, OTLP headers,
// traceparent/tracestate, the binary context, the worker bootstrap, run ids as directory names, and the text
// helpers. Random and mutated inputs (control bytes, %-escapes, huge numbers, unicode) must give a value or a
// ConfigError, never another exception, a crash or (under ASan+UBSan, where the core tests also run) undefined
// behaviour. Fixed seed and iteration count: the same inputs every run, a bounded time in CI. The parsers' side is
// parsers_fuzz.cc, shared with the coverage-guided libFuzzer target (parsers_fuzzer.cc).
#include "parsers_fuzz.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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
    static const std::vector<std::string> kPieces = {"99999999999999999999",
                                                     "-1",
                                                     "9223372036854775807",
                                                     "0x10",
                                                     "nan",
                                                     "inf",
                                                     "1e309",
                                                     "%",
                                                     "%0",
                                                     "%zz",
                                                     "%0d%0a",
                                                     "=",
                                                     ","};
    std::string s;
    for (std::size_t n = pick(12); n > 0; --n)
      s += pick(3) == 0 ? kPieces[pick(kPieces.size())] : std::string(1, byte());
    return s;
  }
  std::mt19937 random_;
};

constexpr int kIterations = 20000;

TEST(ParsersFuzz, ConfigurationVariables) {
  const std::vector<std::string>& variables = fuzz::configuration_variables();
  const std::vector<std::string> seeds = {"1",
                                          "all,-layer",
                                          "per_step",
                                          "all_ranks",
                                          "0.5",
                                          "5000",
                                          "grpc",
                                          "authorization=Bearer%20x,k=v",
                                          "traceidratio",
                                          "gzip",
                                          "9464"};
  Inputs inputs(20261130);
  for (int i = 0; i < kIterations; ++i) {
    const std::string& variable = variables[inputs.pick(variables.size())];
    ASSERT_EQ(fuzz::configuration(variable, inputs.next(seeds), inputs.next(seeds)), "") << variable;
  }
}

TEST(ParsersFuzz, OtlpHeadersForBothTransports) {
  Inputs inputs(1);
  const std::vector<std::string> seeds = {"authorization=Bearer%20TOKEN", "a=b,c=d", "x-bin=%00%0d%0a"};
  for (int i = 0; i < kIterations; ++i) ASSERT_EQ(fuzz::otlp_headers(inputs.next(seeds)), "");
}

TEST(ParsersFuzz, TraceContextAndRunIdsAndTextHelpers) {
  Inputs inputs(2);
  const std::vector<std::string> seeds = {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
                                          "vendor=value,other=x", "https://user:pw@host:4318/v1/traces?key=1"};
  for (int i = 0; i < kIterations; ++i) ASSERT_EQ(fuzz::context_run_id_and_text(inputs.next(seeds)), "");
}

TEST(ParsersFuzz, WorkerBootstrap) {
  WorkerBootstrap valid;
  valid.run_id = "run-1";
  valid.rank = 3;
  const std::vector<std::string> seeds = {valid.serialize()};
  Inputs inputs(3);
  for (int i = 0; i < kIterations; ++i) ASSERT_EQ(fuzz::worker_bootstrap(inputs.next(seeds)), "");
}

TEST(ParsersFuzz, ResourceDetection) {
  const std::vector<std::string>& variables = fuzz::resource_variables();
  const std::vector<std::string> seeds = {"0,1,2,3",     "2147483648", "GPU-6f1a,MIG-2", "4",
                                          "node[01-04]", "k=v,a=%20b", "none",           "99999999999999999999999"};
  Inputs inputs(4);
  for (int i = 0; i < kIterations; ++i) {
    const std::string& variable = variables[inputs.pick(variables.size())];
    ASSERT_EQ(fuzz::resource_detection(variable, inputs.next(seeds)), "") << variable;
  }
}

}  // namespace
}  // namespace lens
