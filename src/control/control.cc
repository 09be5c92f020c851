#include "control/control.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "common/files.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "common/process_identity.h"
#include "common/text.h"
#include "hang/snapshot.h"
#include "lens/control.h"
#include "lens/log.h"

namespace lens::internal {
namespace {

// What the endpoint's thread and the training thread's calls share.
struct ControlState {
  std::mutex mutex;
  Catalogue catalogue = base_catalogue();
  int world_size = 0;
  std::int64_t next_id = 1;
  SpanGroupRequest pending;  // asked, not applied yet (id 0: none)
  std::string pending_spec;
  std::int64_t applied_id = 0;
  std::int64_t iteration = -1;
  std::optional<GroupSet> restore;  // the set before a `--for N` change, and when it comes back
  std::int64_t restore_at = -1;
};

ControlState& state() {
  static auto* s = new ControlState;  // never destroyed: the endpoint's thread may outlive static destruction
  return *s;
}

std::string random_token() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n <= 0) throw ConfigError("lens: no randomness for the control endpoint's token");
    got += static_cast<std::size_t>(n);
  }
  std::string hex;
  char two[3];
  for (unsigned char b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

// Compares in time independent of where they differ: the token is a secret.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

// Mode 0600: the token is the job user's secret.
void write_private_file(const std::string& path, const std::string& text) {
  if (!write_file_atomically(path, text, 0600))
    throw ConfigError("lens: cannot write the control endpoint's file " + path);
}

HttpResponse json(unsigned status, std::string body) { return {status, std::move(body) + "\n", "application/json"}; }

HttpResponse error(unsigned status, std::string_view message) {
  return json(status, "{\"error\": " + json_string(message) + "}");
}

HttpResponse status_response() {
  ControlState& s = state();
  std::lock_guard lock(s.mutex);
  return json(200, "{\"span_groups\": " + json_string(describe(s.catalogue, enabled_span_groups())) +
                       ", \"iteration\": " + std::to_string(s.iteration) +
                       ", \"world_size\": " + std::to_string(s.world_size) +
                       ", \"pending\": " + (s.pending.id != 0 ? json_string(s.pending_spec) : "null") +
                       ", \"restore_at\": " + std::to_string(s.restore ? s.restore_at : -1) + "}");
}

// control.json of a job that still runs (the same FILE_DIR and run id): this one would take the file over and
// remove it at its end, and `lens ctl` would report the first job as ended. A job on another host (a shared file
// system) cannot be asked whether it runs: it is taken to.
void refuse_a_live_owner(const std::string& file) {
  const std::optional<std::string> text = read_regular_file(file, kMaxControlFileBytes);
  if (!text) return;
  const std::size_t pid_at = text->find("\"pid\": "), host_at = text->find("\"host\": \"");
  if (pid_at == std::string::npos) return;
  long long pid = 0;
  std::from_chars(text->data() + pid_at + 7, text->data() + text->size(), pid);
  std::string host = this_host();
  if (host_at != std::string::npos) host = text->substr(host_at + 9, text->find('"', host_at + 9) - host_at - 9);
  const bool here = host == this_host();
  if (here && (pid <= 0 || pid == ::getpid() || pid > INT32_MAX)) return;
  if (!here || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)
    throw ConfigError("lens: another job (pid " + std::to_string(pid) + " on " + printable_excerpt(host, 64) +
                      ") serves the control endpoint of this run (" + file +
                      "); give this job its own run id (<PREFIX>_RUN_ID) or FILE_DIR, or remove the file if that "
                      "job has ended");
}

std::function<void()>& spec_resolution_hook() {
  static auto* hook = new std::function<void()>;  // set by tests only, before a request
  return *hook;
}

// The longest `--for`: a billion iterations (leave --for out to keep a change).
constexpr std::int64_t kMaxForIterations = 1'000'000'000;

HttpResponse change_request(const HttpRequest& request) {
  const char* spec = request.query("spec");
  if (spec == nullptr) return error(400, "POST /span-groups?spec=SPEC[&for=N]: spec is missing");
  // An empty spec resolves to no group: asked for by mistake (`lens ctl RUN span-groups ''`), it would have turned
  // every span off. Every group off is said as such.
  if (std::string_view(spec).find_first_not_of(", \t") == std::string_view::npos)
    return error(400, "the spec is empty, which would turn every span group off; to do that, ask for '-all'");
  std::int64_t iterations = 0;
  if (const char* n = request.query("for")) {
    // Bounded, so that the iteration it restores at is a number (for=9223372036854775000 would wrap around).
    const std::optional<std::int64_t> wanted = whole_number(n, 1, kMaxForIterations);
    if (!wanted)
      return error(400, std::string("for=") + printable_excerpt(n, 32) + " is not a number of iterations (1 to " +
                            std::to_string(kMaxForIterations) + ")");
    iterations = *wanted;
  }
  ControlState& s = state();
  // The spec is resolved on a copy of the catalogue, outside the lock the training threads take at every iteration
  // boundary: a flood of bad specs (each a closest-name search) held it and doubled step time.
  Catalogue catalogue;
  {
    std::lock_guard lock(s.mutex);
    catalogue = s.catalogue;
  }
  GroupSet groups;
  try {
    groups = resolve(catalogue, spec, "the span-groups request");
    if (const auto& hook = spec_resolution_hook()) hook();
  } catch (const ConfigError& e) {
    return error(400, e.what());  // the same message as a bad spec at setup
  }
  std::lock_guard lock(s.mutex);
  if (s.pending.id != 0)
    return error(
        409, "a change to '" + s.pending_spec + "' is pending until the next iteration boundary; ask again after it");
  s.pending = {s.next_id++, groups.bits(), iterations};
  s.pending_spec = spec;
  return json(202, "{\"id\": " + std::to_string(s.pending.id) + ", \"span_groups\": " +
                       json_string(describe(s.catalogue, groups)) + ", \"for\": " + std::to_string(iterations) +
                       ", \"from_iteration_after\": " + std::to_string(s.iteration) + "}");
}

// Requests the endpoint answers: a bucket of kBurst refilled at kPerSecond. A person with `lens ctl` asks a few
// times a minute; a flood (an authenticated one doubled step time) is answered 429 at once, with no work.
class RequestBudget {
 public:
  static constexpr double kPerSecond = 20, kBurst = 40;
  bool take() {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(kBurst, tokens_ + std::chrono::duration<double>(now - last_).count() * kPerSecond);
    last_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  std::mutex mutex_;
  double tokens_ = kBurst;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

HttpResponse answer(const HttpRequest& request, const std::string& token, RequestBudget& budget) {
  if (!budget.take()) return error(429, "too many requests: the control endpoint answers 20 a second");
  const char* authorization = request.header("Authorization");
  if (authorization == nullptr || !same_secret(authorization, "Bearer " + token))
    return error(401, "no token or a wrong one: lens ctl reads it from the run's control.json");
  if (request.has_body()) return error(400, "the control endpoint reads no body: the request is in the query");
  if (request.path == "/status" && request.method == "GET") return status_response();
  if (request.path == "/span-groups" && request.method == "POST") return change_request(request);
  return error(404, "the control endpoint serves GET /status and POST /span-groups?spec=SPEC[&for=N]");
}

void record_change(const SpanGroupChange& c) {
  log_info("span groups %s at iteration %lld: %s%s", c.restored ? "restored" : "changed",
           static_cast<long long>(c.iteration), c.groups_text.empty() ? "(none)" : c.groups_text.c_str(),
           c.iterations > 0 ? (" (for " + std::to_string(c.iterations) + " iterations)").c_str() : "");
  if (should_log(Severity::kInfo)) {
    const std::string body =
        std::string("span groups ") + (c.restored ? "restored" : "changed") + " to " + c.groups_text;
    const Attribute attributes[] = {{"lens.span_groups", c.groups_text.c_str()},
                                    {"megatron.iteration", c.iteration},
                                    {"lens.span_groups.for", c.iterations}};
    emit_log(static_cast<int>(Severity::kInfo), severity_text(Severity::kInfo), body, attributes,
             std::chrono::system_clock::now());
  }
}

}  // namespace

ControlEndpoint::ControlEndpoint(const Config& config, const std::string& run_dir, int world_size)
    : token_(random_token()) {
  {
    ControlState& s = state();
    std::lock_guard lock(s.mutex);
    s.catalogue = config.catalogue;
    s.world_size = world_size;
  }
  const auto colon = config.control_address.rfind(':');
  int wanted_port = -1;
  if (colon != std::string::npos && colon > 0) {
    const char* first = config.control_address.c_str() + colon + 1;
    const char* last = config.control_address.c_str() + config.control_address.size();
    const auto [end, error] = std::from_chars(first, last, wanted_port);
    if (error != std::errc() || end != last || first == last || wanted_port > 65535) wanted_port = -1;
  }
  if (wanted_port < 0)
    throw ConfigError("lens: the control address '" + config.control_address +
                      "' is not host:port (P_CONTROL_ADDRESS, e.g. 127.0.0.1:0)");
  const std::string host = config.control_address.substr(0, colon);
  try {
    server_ = std::make_unique<HttpServer>(
        host, wanted_port, [token = token_, budget = std::make_shared<RequestBudget>()](const HttpRequest& r) {
          return answer(r, token, *budget);
        });
  } catch (const std::runtime_error& e) {
    throw ConfigError("lens: cannot serve the control endpoint on " + config.control_address + " (" + e.what() +
                      "); set P_CONTROL_ADDRESS to a free local host:port");
  }
  // Made as the file exporter makes it; a link planted in its place would take the token elsewhere.
  if (const std::error_code error = make_private_directories(run_dir))
    throw ConfigError(
        "lens: cannot serve the control endpoint: the run directory " + run_dir + " is not ours (" +
        (error == std::errc::not_a_directory ? "a file or symbolic link is in its place" : error.message()) +
        "); set <PREFIX>_FILE_DIR or <PREFIX>_RUN_ID");
  file_ = (std::filesystem::path(run_dir) / "control.json").string();
  refuse_a_live_owner(file_);
  write_private_file(file_, "{\"address\": " + json_string(host) + ", \"port\": " + std::to_string(port()) +
                                ", \"token\": " + json_string(token_) + ", \"host\": " + json_string(this_host()) +
                                ", \"pid\": " + std::to_string(::getpid()) + "}\n");
}

ControlEndpoint::~ControlEndpoint() {
  server_->stop();
  // Only our own file: a setup that replaces this one (reinit, same run) has written its own there already; and
  // only a regular file of a control file's size, never read through a link (a link to /dev/zero filled memory, a
  // FIFO never answered: the rank could not exit).
  const std::optional<std::string> text = read_regular_file(file_, kMaxControlFileBytes);
  if (text && text->find(token_) != std::string::npos) ::unlink(file_.c_str());
}

void set_spec_resolution_hook_for_testing(std::function<void()> hook) { spec_resolution_hook() = std::move(hook); }

void reset_control_state() noexcept {
  try {
    ControlState& s = state();
    std::lock_guard lock(s.mutex);
    s.pending = {};
    s.applied_id = 0;
    s.iteration = -1;
    s.restore.reset();
    s.restore_at = -1;
  } catch (...) {  // the mutex cannot be taken (it never fails uncontended on Linux): nothing to forget then
  }
}

void set_control_catalogue(const Catalogue& catalogue) {
  ControlState& s = state();
  std::lock_guard lock(s.mutex);
  s.catalogue = catalogue;
}

}  // namespace lens::internal

namespace lens {
LENS_ABI_NAMESPACE_BEGIN

SpanGroupRequest take_span_group_request() noexcept {
  try {
    internal::ControlState& s = internal::state();
    std::lock_guard lock(s.mutex);
    return s.pending;
  } catch (...) {  // no request can be read: none is asked
    return {};
  }
}

std::optional<SpanGroupChange> at_iteration_boundary(std::int64_t iteration, const SpanGroupRequest& agreed) noexcept {
  std::optional<SpanGroupChange> change;
  try {
    internal::ControlState& s = internal::state();
    std::lock_guard lock(s.mutex);
    s.iteration = iteration;
    internal::note_iteration_boundary(iteration);  // the hang watchdog's heartbeat
    const GroupSet from = enabled_span_groups();
    if (agreed.id > s.applied_id && !(agreed.iterations >= 0 && agreed.iterations <= internal::kMaxForIterations)) {
      // Words no rank 0 asks for (lens ctl bounds --for): refused, so no change lasts for 2^63 iterations.
      s.applied_id = agreed.id;
      internal::log_warning("a span-group change for %lld iterations was refused: the most is %lld (lens ctl --for)",
                            static_cast<long long>(agreed.iterations),
                            static_cast<long long>(internal::kMaxForIterations));
    } else if (agreed.id > s.applied_id) {
      s.applied_id = agreed.id;
      if (s.pending.id == agreed.id) s.pending = {};
      // A `--for N` change keeps the set from before any change still timed: that is what comes back.
      if (agreed.iterations > 0) {
        if (!s.restore) s.restore = from;
        s.restore_at = iteration + agreed.iterations;
      } else {
        s.restore.reset();
      }
      const GroupSet to = set_enabled_span_groups(GroupSet(agreed.groups));
      change = SpanGroupChange{iteration, from, to, agreed.iterations, false, describe(s.catalogue, to)};
    } else if (s.restore && iteration >= s.restore_at) {
      const GroupSet to = set_enabled_span_groups(*s.restore);
      s.restore.reset();
      change = SpanGroupChange{iteration, from, to, 0, true, describe(s.catalogue, to)};
    }
    if (change) internal::record_change(*change);
  } catch (...) {  // no memory to describe or log the set: what was applied stands
  }
  return change;
}

LENS_ABI_NAMESPACE_END
}  // namespace lens
