#include "checkpoint_worker.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "lens/lens.h"

extern char** environ;

namespace trainer {

namespace {

namespace mg = lens::megatron::group;
constexpr int kRequestFd = 3, kAnswerFd = 4;

// Moves all n bytes through `io` (::read or ::write), resuming after partial transfers and EINTR; false at end
// of file or on an error.
template <typename Byte, typename Io>
bool transfer_all(int fd, Byte* at, std::size_t n, Io io) {
  while (n > 0) {
    ssize_t k = io(fd, at, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    at += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool write_all(int fd, const void* data, std::size_t n) {
  return transfer_all(fd, static_cast<const char*>(data), n, ::write);
}

bool read_all(int fd, void* data, std::size_t n) { return transfer_all(fd, static_cast<char*>(data), n, ::read); }

// A frame: 8-byte length, then the bytes.
bool write_frame(int fd, const std::string& s) {
  const std::uint64_t n = s.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, s.data(), s.size());
}

std::optional<std::string> read_frame(int fd) {
  std::uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n)) return std::nullopt;
  std::string s(n, '\0');
  if (!read_all(fd, s.data(), n)) return std::nullopt;
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  {
    std::ofstream out(path + ".tmp", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + path + ".tmp");
  }
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace

CheckpointWorker::CheckpointWorker() {
  int requests[2], answers[2];
  if (::pipe2(requests, O_CLOEXEC) != 0 || ::pipe2(answers, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "checkpoint worker pipes");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, requests[0], kRequestFd);
  posix_spawn_file_actions_adddup2(&actions, answers[1], kAnswerFd);
  char self[] = "/proc/self/exe";
  char flag[] = "--checkpoint-worker";
  char* argv[] = {self, flag, nullptr};
  // The worker starts with the hang signals blocked: one that arrives while it loads (LibTorch takes a second) stays
  // pending, and is dropped when the worker ignores it (run_checkpoint_worker), instead of ending it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t mask;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  ::sigaddset(&mask, SIGUSR1);
  ::sigaddset(&mask, SIGUSR2);
  posix_spawnattr_setsigmask(&attributes, &mask);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  int error = posix_spawn(&pid_, self, &actions, &attributes, argv, environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(requests[0]);
  ::close(answers[1]);
  to_worker_ = requests[1];
  from_worker_ = answers[0];
  if (error != 0) throw std::system_error(error, std::generic_category(), "starting the checkpoint worker");
}

CheckpointWorker::~CheckpointWorker() {
  ::close(to_worker_);
  ::close(from_worker_);
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
}

void CheckpointWorker::submit(const std::string& bootstrap, const std::string& path, const std::string& bytes) {
  if (!write_frame(to_worker_, bootstrap) || !write_frame(to_worker_, path) || !write_frame(to_worker_, bytes))
    throw std::runtime_error(gone());
}

std::string CheckpointWorker::gone() const {
  std::string what = "the checkpoint worker (pid " + std::to_string(pid_) + ") is gone";
  int status = 0;
  // Its pipe closes as it dies: give the kernel half a second to make the exit status known.
  pid_t reaped = 0;
  for (int i = 0; i < 50 && (reaped = ::waitpid(pid_, &status, WNOHANG)) == 0; ++i) ::usleep(10000);
  if (reaped != pid_) return what;
  if (WIFSIGNALED(status)) {
    return what + ": killed by signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  }
  return what + ": it exited with status " + std::to_string(WEXITSTATUS(status));
}

bool CheckpointWorker::wait_written() {
  char status = 1;
  return read_all(from_worker_, &status, 1) && status == 0;
}

int run_checkpoint_worker() {
  std::signal(SIGTERM, SIG_IGN);  // the trainer decides when the worker ends: when it closes the pipe
  // The hang signal (sent to every process of the job, e.g. `pkill -USR1 pretrain_gpt`) is the ranks' to answer:
  // its default action would end the worker, and the job with it.
  int hang_signal = SIGUSR1;
  try {
    hang_signal = lens::megatron::config_from_env().hang_signal;
  } catch (const lens::ConfigError&) {  // the rank said why already
  }
  lens::ignore_hang_signal_in_helper(hang_signal);
  sigset_t blocked_at_spawn;  // by CheckpointWorker's constructor; a pending hang signal is dropped now
  ::sigemptyset(&blocked_at_spawn);
  ::sigaddset(&blocked_at_spawn, SIGUSR1);
  ::sigaddset(&blocked_at_spawn, SIGUSR2);
  ::pthread_sigmask(SIG_UNBLOCK, &blocked_at_spawn, nullptr);
  lens::Telemetry telemetry;
  for (;;) {
    std::optional<std::string> bootstrap = read_frame(kRequestFd), path, bytes;
    if (bootstrap) path = read_frame(kRequestFd);
    if (path) bytes = read_frame(kRequestFd);
    if (!bytes) break;  // the trainer closed the pipe: done
    char status = 0;
    try {
      const lens::WorkerBootstrap boot = lens::WorkerBootstrap::parse(*bootstrap);
      if (!telemetry.is_exporting() && boot.enabled)
        telemetry = lens::setup_worker_telemetry(boot, lens::megatron::config_from_env());
      lens::ScopedSpan request;
      if (LENS_GROUP_ENABLED(mg::checkpoint)) {
        request.start(mg::checkpoint, "nvrx.checkpoint.save.request");
        if (boot.link.is_valid()) request.add_link(boot.link);
      }
      LENS_SPAN_NAMED(write, mg::checkpoint, "nvrx.checkpoint.save.write");
      if (boot.link.is_valid()) write.add_link(boot.link);
      write_file(*path, *bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pretrain_gpt checkpoint worker: %s\n", e.what());
      status = 1;
    }
    if (!write_all(kAnswerFd, &status, 1)) break;
  }
  telemetry.shutdown();
  return 0;
}

}  // namespace trainer
