// libFuzzer target for what the tools read from files: a run's OTLP/JSON lines (lens report, lens
// convert), a hang snapshot (lens hang) and control.json (lens ctl). The first byte picks the reader, the rest is the
// file. Each input must give figures, a verdict or a refusal: never a crash, a sanitizer report, or memory beyond
// libFuzzer's -rss_limit_mb. Built only in the fuzz configuration (-DLENS_FUZZ=ON, clang); seeds in
// readers_fuzzer_seeds/.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "ctl.h"
#include "hang.h"
#include "report.h"
#include "run_reader.h"
#include "text.h"
#include "timeline.h"

namespace {

namespace fs = std::filesystem;

// A directory of this process's own for the file under test.
const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("lens-readers-fuzzer-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::freopen("/dev/null", "w", stdout);  // lens hang prints its verdict
    return d;
  }();
  return dir;
}

fs::path write(const std::string& name, std::string_view text) {
  const fs::path path = scratch() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(text.data(), static_cast<std::streamsize>(text.size()));
  return path;
}

void read_as_run(std::string_view text) {
  const std::vector<std::string> files{write("rank0.traces.jsonl", text).string()};
  lens_tools::Report report;
  const lens_tools::ReadStats read = lens_tools::read_run(files, report, {});
  const lens_tools::Figures figures = report.figures(read, true);
  (void)lens_tools::figures_json(figures).dump();
  (void)lens_tools::render_text(figures);
  lens_tools::Timeline timeline;
  lens_tools::read_run(files, timeline, {.detail = true});
  timeline.lay_out();
}

void read_as_snapshot(std::string_view text) {
  fs::remove(scratch() / "control.json");
  write("rank0.snapshot.json", text);
  lens_tools::hang({scratch().string()}, true);
  fs::remove(scratch() / "rank0.snapshot.json");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: read_as_run(text); break;
    case 1: read_as_snapshot(text); break;
    default: (void)lens_tools::parse_control_file(text, nullptr); break;
  }
  return 0;
}
