// The coverage-guided fuzz target (libFuzzer, Debian's clang) over every parser of text from outside: the first
// byte picks the parser (and, for the configuration, the variable), the rest is the input. Built with
// -DLENS_FUZZ=ON under clang; scripts/test.sh runs it for a bounded time on every CI run.
//
//   build-fuzz/tests/lens_parsers_fuzzer -max_total_time=60 corpus/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parsers_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t pick = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string failure;
  switch (pick % 5) {
    case 0: {
      const auto& variables = lens::fuzz::configuration_variables();
      const std::size_t cut = text.find('\n');  // the sampler argument after a newline, if any
      failure = lens::fuzz::configuration(variables[(pick / 4) % variables.size()], text.substr(0, cut),
                                          cut == std::string::npos ? "" : text.substr(cut + 1));
      break;
    }
    case 1: failure = lens::fuzz::otlp_headers(text); break;
    case 2: failure = lens::fuzz::context_run_id_and_text(text); break;
    case 3: failure = lens::fuzz::worker_bootstrap(text); break;
    default: {
      const auto& variables = lens::fuzz::resource_variables();
      failure = lens::fuzz::resource_detection(variables[(pick / 5) % variables.size()], text);
      break;
    }
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "lens_parsers_fuzzer: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
