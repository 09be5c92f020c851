// A process that records spans for the multi-process tests. Telemetry comes from the environment
// (MEGATRON_OTEL_*), so the test decides exporter, directory and run id.
//   span_probe ids N     seed every user RNG identically, record N root spans, exit normally
//   span_probe sigterm   record 5 spans, open two, say "ready", wait to be killed
//   span_probe sigterm-user-handler   the same with the program's own SIGTERM handler installed first (it exits)
//   span_probe sigterm-user-flag   the same with a handler that only sets a flag: the program then ends its open
//                                  spans, records one more ("after.signal", as a last checkpoint save) and returns
//   span_probe invalid-text SNAPSHOT   a thread named with a name the kernel cuts inside a character, spans and
//                                  attributes of invalid UTF-8; writes a hang snapshot (its signal), waits for
//                                  SNAPSHOT to appear, then ends the spans and exits normally
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "lens/megatron.h"
#include "lens/telemetry.h"

namespace mg = lens::megatron::group;

namespace {

void user_handler(int) {
  const char text[] = "user handler ran\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text, sizeof text - 1);
  ::_exit(7);
}

volatile sig_atomic_t g_stop = 0;
void flag_handler(int) { g_stop = 1; }

int wait_for_sigterm(bool goes_on) {
  { LENS_SPAN(mg::job, "before.0"); }
  { LENS_SPAN(mg::job, "before.1"); }
  { LENS_SPAN(mg::job, "before.2"); }
  { LENS_SPAN(mg::job, "before.3"); }
  { LENS_SPAN(mg::job, "before.4"); }
  {
    LENS_SPAN(mg::job, "open.outer");
    LENS_SPAN(mg::step, "open.inner");
    std::printf("ready\n");
    std::fflush(stdout);
    while (!goes_on || !g_stop) ::pause();
  }
  { LENS_SPAN(mg::job, "after.signal"); }
  return 0;
}

// Text no strict JSON parser takes as it is: every file lens writes from it must still parse (common/json_escape.h).
int invalid_text(lens::Telemetry& telemetry, const char* snapshot) {
  // Nine two-byte characters: the kernel keeps 15 bytes of a thread name, the first half of the eighth.
  ::prctl(PR_SET_NAME, "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9");
  {
    lens::Span step(mg::step, "megatron.train_step", {{"iteration", std::int64_t{3}}});
    lens::Span bad(mg::job, "bad.\xFF\xFE.name\xE2\x82",
                   {{"cut\xC3", std::string_view("\xED\xA0\x80 surrogate, \xC0\x80 overlong, \x1b[2J")}});
    if (::raise(SIGUSR1) != 0) return 1;
    for (int i = 0; i < 1000 && !std::filesystem::exists(snapshot); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return telemetry.shutdown() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "sigterm-user-handler") ::signal(SIGTERM, user_handler);
  if (mode == "sigterm-user-flag") ::signal(SIGTERM, flag_handler);
  // Identical user seeding on every rank, as training scripts do: lens ids must not follow it.
  std::srand(42);
  std::mt19937 user_rng(42);
  lens::Telemetry telemetry = lens::setup_telemetry(lens::megatron::config_from_env());
  if (mode == "ids") {
    int n = argc > 2 ? std::atoi(argv[2]) : 100;
    for (int i = 0; i < n; ++i) {
      LENS_SPAN(mg::job, "id.root", {"user.random", static_cast<std::int64_t>(user_rng())});
      LENS_SPAN(mg::step, "id.child");
    }
    return telemetry.shutdown() ? 0 : 1;
  }
  if (mode == "sigterm" || mode == "sigterm-user-handler") return wait_for_sigterm(false);
  if (mode == "sigterm-user-flag") return wait_for_sigterm(true);
  if (mode == "invalid-text" && argc > 2) return invalid_text(telemetry, argv[2]);
  std::fprintf(
      stderr, "usage: span_probe ids N | sigterm | sigterm-user-handler | sigterm-user-flag | invalid-text SNAPSHOT\n");
  return 2;
}
