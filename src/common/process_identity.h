// Who a process is on this host, beyond its pid (which the kernel reuses): the host's boot, the process's start
// time and its command name, all from /proc. A rank records its own at setup (rank<R>.process.json, hang/
// rank_process.h); `lens hang RUN_DIR --signal` signals a recorded pid only when all three still match, so a pid
// that a process of another run or another user has since taken is never signalled.
//
//   std::optional<ProcessIdentity> me = process_identity(::getpid());
//   if (recorded == process_identity(pid)) ::kill(pid, SIGUSR1);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace lens::internal {

struct ProcessIdentity {
  std::string boot_id;            // /proc/sys/kernel/random/boot_id: the host and its boot
  std::uint64_t start_ticks = 0;  // field 22 of /proc/<pid>/stat: clock ticks after boot
  std::string comm;               // /proc/<pid>/comm: the command name (15 bytes at most)
  bool operator==(const ProcessIdentity&) const = default;
};

// nullopt when /proc cannot tell (the process has ended, or /proc is not mounted).
std::optional<ProcessIdentity> process_identity(pid_t pid);

// The calling process's PID namespace (the inode of /proc/self/ns/pid), nullopt when /proc cannot tell. A pid means
// a process only within its namespace: a rank in a container is another pid (or none) outside it.
std::optional<std::uint64_t> this_pid_namespace();

// The real user id a process runs as (/proc/<pid>/status), nullopt when /proc cannot tell.
std::optional<uid_t> process_owner(pid_t pid);

// This host's name (gethostname), "" when it cannot be read.
std::string this_host();

}  // namespace lens::internal
