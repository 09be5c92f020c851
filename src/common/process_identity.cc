#include "common/process_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/text.h"

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
  const std::optional<std::int64_t> ticks = whole_number(field, 0);
  if (!ticks) return std::nullopt;
  return static_cast<std::uint64_t>(*ticks);
}

}  // namespace

std::optional<std::uint64_t> this_pid_namespace() {
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(ns.st_ino);
}

std::optional<uid_t> process_owner(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream ids(line.substr(4));
    std::string real;
    if (!(ids >> real)) return std::nullopt;
    const std::optional<std::int64_t> uid = whole_number(real, 0, UINT32_MAX - 1);
    return uid ? std::optional<uid_t>(static_cast<uid_t>(*uid)) : std::nullopt;
  }
  return std::nullopt;
}

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
