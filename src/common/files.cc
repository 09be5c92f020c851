#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

namespace lens::internal {

namespace {

// Makes each missing directory of `path`: the last with `last_mode`, the others 0755, each exactly that (whatever the
// umask: chmod of a directory this call made). Those that exist are left as they are.
std::error_code make_missing_directories(const std::filesystem::path& path, mode_t last_mode) {
  std::filesystem::path at;
  for (auto part = path.begin(); part != path.end(); ++part) {
    at /= *part;
    const mode_t mode = std::next(part) == path.end() ? last_mode : 0755;
    if (::mkdir(at.c_str(), mode) == 0) {
      if (::chmod(at.c_str(), mode) != 0) return {errno, std::generic_category()};
    } else if (errno != EEXIST) {
      return {errno, std::generic_category()};
    }
  }
  return {};
}

}  // namespace

std::error_code make_readable_directories(const std::filesystem::path& path) {
  if (std::error_code error = make_missing_directories(path, 0755)) return error;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {errno, std::generic_category()};
  if (!S_ISDIR(st.st_mode)) return std::make_error_code(std::errc::not_a_directory);
  return {};
}

std::optional<std::filesystem::path> first_closed_to_others(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path;
  std::filesystem::path at;
  for (auto part = absolute.begin(); part != absolute.end(); ++part) {
    at /= *part;
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0) return at;
    const mode_t needed = std::next(part) == absolute.end() ? (S_IROTH | S_IXOTH) : S_IXOTH;
    if ((st.st_mode & needed) != needed) return at;
  }
  return std::nullopt;
}

std::error_code make_private_directories(const std::filesystem::path& path) {
  if (std::error_code error = make_missing_directories(path, 0700)) return error;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {errno, std::generic_category()};
  if (!S_ISDIR(st.st_mode)) return std::make_error_code(std::errc::not_a_directory);
  // One that was there already: another user's is refused (its owner could replace what lens writes there); one
  // of ours that others may write in (0777, say) is made private.
  if (st.st_uid != ::geteuid()) return std::make_error_code(std::errc::permission_denied);
  if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), 0700) != 0) return {errno, std::generic_category()};
  return {};
}

bool write_file_atomically(const std::string& path, std::string_view text, unsigned mode) {
  const std::string temporary = path + ".tmp";
  ::unlink(temporary.c_str());  // a leftover of a write cut short, or something planted there
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return false;
  bool ok = ::fchmod(fd, mode) == 0;  // whatever the umask
  for (std::size_t at = 0; ok && at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    ok = n > 0;
    if (ok) at += static_cast<std::size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(temporary.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(temporary.c_str());
  return ok;
}

std::optional<std::string> read_regular_file(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) <= max_bytes) {
    text.emplace(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t at = 0;
    while (at < text->size()) {
      const ssize_t n = ::read(fd, text->data() + at, text->size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    text->resize(at);
  }
  ::close(fd);
  return text;
}

void remove_file(const std::string& path) noexcept {
  std::error_code error;
  std::filesystem::remove(path, error);
}

void remove_file_and_empty_directory(const std::string& path) noexcept {
  std::error_code error;
  std::filesystem::remove(path, error);
  std::filesystem::remove(std::filesystem::path(path).parent_path(), error);  // only when empty
}

}  // namespace lens::internal
