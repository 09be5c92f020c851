#include "common/process_identity.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

namespace lens::internal {

namespace {

std::optional<std::string> first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// Field 22 of a stat line. The command name (field 2) is in parentheses and may hold spaces and ')': the fields
// after it are counted from the last ')'.
std::optional<std::uint64_t> start_ticks_of(const std::string& stat) {
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int n = 3; n <= 22; ++n)  // fields 3 (state) to 22 (starttime)
    if (!(fields >> field)) return std::nullopt;
  char* end = nullptr;
  const unsigned long long ticks = std::strtoull(field.c_str(), &end, 10);
  if (end == field.c_str() || *end != '\0') return std::nullopt;
  return ticks;
}

}  // namespace

std::string this_host() {
  char host[256] = {};
  return ::gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string();
}

std::optional<ProcessIdentity> process_identity(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::optional<std::string> boot = first_line("/proc/sys/kernel/random/boot_id");
  const std::optional<std::string> stat = first_line(dir + "/stat");
  const std::optional<std::string> comm = first_line(dir + "/comm");
  if (!boot || !stat || !comm) return std::nullopt;
  const std::optional<std::uint64_t> ticks = start_ticks_of(*stat);
  if (!ticks) return std::nullopt;
  return ProcessIdentity{*boot, *ticks, *comm};
}

}  // namespace lens::internal
