// Files lens writes itself beside a run's telemetry (control.json, hang snapshots) and the directories they go in.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace lens::internal {

// Makes `path` a private directory (the files in it name hosts, jobs and users): the last directory, when missing, with
// mode 0700, each missing one above it 0755 (they hold only such directories, and <FILE_DIR>/prometheus, which
// Prometheus reads); directories that exist keep their mode, but for the last: a symlink or a file in its place is
// refused (not_a_directory), another user's directory is refused (permission_denied), and one of ours that others
// may write in is made 0700.
std::error_code make_private_directories(const std::filesystem::path& path);

// Makes each missing directory of `path` with mode 0755 exactly (a directory another user's program reads, such as
// Prometheus's file service discovery); directories that exist keep their mode and owner, whoever it is. A symlink or
// a file in place of the last is refused (not_a_directory).
std::error_code make_readable_directories(const std::filesystem::path& path);

// The first of `path` and the directories above it that a user other than its owner (and outside its group) cannot
// search, or `path` itself when such a user cannot list it; nullopt when all can.
std::optional<std::filesystem::path> first_closed_to_others(const std::filesystem::path& path);

// Writes `text` to `path` under a temporary name (made afresh, never through a symlink) with `mode`, and renames it
// over `path`: a reader sees the whole file or none. False when it could not.
bool write_file_atomically(const std::string& path, std::string_view text, unsigned mode);

// Removes `path`; errors are ignored.
void remove_file(const std::string& path) noexcept;

// Removes `path`, then its directory when that is left empty (a file lens wrote while it ran, such as a rank's
// process record); errors are ignored: nothing to remove is nothing to do.
void remove_file_and_empty_directory(const std::string& path) noexcept;

// The most a control.json holds (address, port, token, pid: about 150 bytes), as the rank and `lens ctl` read it.
inline constexpr std::size_t kMaxControlFileBytes = 4096;

// The text of `path` when it is a regular file of at most `max_bytes`, opened without following a symlink and
// without blocking (a FIFO or a device planted there is refused, never read: /dev/zero would fill memory, a FIFO
// would never answer); nullopt otherwise.
std::optional<std::string> read_regular_file(const std::string& path, std::size_t max_bytes);

}  // namespace lens::internal
