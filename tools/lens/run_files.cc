// A run's files: which files of the inputs lens reads (OTLP/JSON Lines, plain or gzip), and a large plain file cut
// into parts at line starts for the parallel read.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "run_reader.h"

namespace lens_tools {
namespace {

namespace fs = std::filesystem;

// Whether a .json file begins as an OTLP/JSON request does ({"resourceSpans", {"resourceMetrics", ...).
bool begins_as_otlp(const fs::path& p) {
  gzFile file = gzopen(p.c_str(), "rb");
  if (file == nullptr) return false;
  char head[64] = {};
  const int n = gzread(file, head, sizeof head - 1);
  gzclose(file);
  std::string_view text(head, n > 0 ? static_cast<std::size_t>(n) : 0);
  text.remove_prefix(std::min(text.find_first_not_of(" \t\r\n"), text.size()));
  return text.starts_with("{\"resource");
}

// In a directory: OTLP/JSON Lines files (lens's, a Collector's), plain or gzip; a .json file only when it is OTLP.
// What lens writes beside its telemetry is left alone: hang snapshots, control.json, a converted Chrome trace.
bool is_telemetry_file(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  if (name == "control.json" || name.ends_with(".snapshot.json")) return false;
  if (name.ends_with(".jsonl")) return true;
  return name.ends_with(".json") && begins_as_otlp(p);
}

void add_telemetry_files(const fs::path& root, std::vector<std::string>& files) {
  std::error_code error;
  if (fs::is_regular_file(root, error)) {
    files.push_back(root.string());
    return;
  }
  // A subdirectory that cannot be read is passed over, not the end of the listing.
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error) && is_telemetry_file(it->path())) files.push_back(it->path().string());
  }
}

// Where the line after the first newline at or after `from` begins; none when the file ends first.
std::optional<std::uint64_t> line_start_after(std::FILE* file, std::uint64_t from, std::vector<char>& buffer) {
  if (std::fseek(file, static_cast<long>(from), SEEK_SET) != 0) return std::nullopt;
  for (std::uint64_t at = from;;) {
    const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), file);
    if (n == 0) return std::nullopt;
    if (const void* newline = std::memchr(buffer.data(), '\n', n))
      return at + static_cast<std::uint64_t>(static_cast<const char*>(newline) - buffer.data()) + 1;
    at += n;
  }
}

}  // namespace

std::vector<std::string> telemetry_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> found;
  for (const std::string& input : inputs) add_telemetry_files(input, found);
  // One file reached twice (a directory and its parent, a path and a link to it) is read once: by its canonical path.
  std::map<std::string, std::string> by_canonical;
  for (const std::string& file : found) {
    std::error_code error;
    const fs::path canonical = fs::weakly_canonical(file, error);
    by_canonical.emplace(error ? file : canonical.string(), file);
  }
  std::vector<std::string> files;
  files.reserve(by_canonical.size());
  for (const auto& [canonical, file] : by_canonical) files.push_back(file);
  std::sort(files.begin(), files.end());
  return files;
}

std::string inputs_text(const std::vector<std::string>& inputs) {
  std::string text;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    text += (i == 0 ? "" : i + 1 == inputs.size() ? " and " : ", ") + inputs[i];
  return text;
}

std::vector<std::uint64_t> line_starts_for_parts(const std::string& path, std::size_t parts) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return {};
  parts = static_cast<std::size_t>(std::min<std::uintmax_t>(parts, size / kMinPartBytes));
  if (parts < 2) return {};
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  unsigned char magic[2] = {};
  if (file == nullptr || std::fread(magic, 1, 2, file.get()) != 2 || (magic[0] == 0x1f && magic[1] == 0x8b))
    return {};  // gzip: read whole, by one thread
  std::vector<std::uint64_t> cuts{0};
  std::vector<char> buffer(1 << 16);
  for (std::size_t k = 1; k < parts; ++k) {
    // The first line that begins at or after the k-th share of the bytes (and after the part before).
    const std::uint64_t share = std::max<std::uint64_t>(size * k / parts, cuts.back() + 1);
    const std::optional<std::uint64_t> start = line_start_after(file.get(), share - 1, buffer);
    if (!start || *start >= size) break;
    cuts.push_back(*start);
  }
  if (cuts.size() < 2) return {};
  cuts.push_back(size);
  return cuts;
}

}  // namespace lens_tools
