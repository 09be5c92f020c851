// One input for each parser of text from outside (configuration variables, OTLP headers for both transports,
// traceparent/tracestate, the binary context, run ids as directory names, the text helpers, the worker
// bootstrap, resource detection), shared by the seeded test (parsers_fuzz_unittest.cc, every CI run) and the
// coverage-guided libFuzzer target (parsers_fuzzer.cc). Each returns what went wrong, or "" when the parser gave a
// value or a ConfigError and its result kept its promises.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lens::fuzz {

// The variables the configuration fuzzing sets one at a time (with OTEL_TRACES_SAMPLER_ARG beside).
const std::vector<std::string>& configuration_variables();

std::string configuration(const std::string& variable, const std::string& value, const std::string& sampler_arg);
std::string otlp_headers(const std::string& text);
std::string context_run_id_and_text(const std::string& text);
std::string worker_bootstrap(const std::string& text);
// The variables resource detection reads, and detection with one of them set to `value` (beside a local rank of
// 0 to 3): a resource always, never an exception.
const std::vector<std::string>& resource_variables();
std::string resource_detection(const std::string& variable, const std::string& value);

}  // namespace lens::fuzz
