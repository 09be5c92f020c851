// `lens ctl`: talks to a running job's control endpoint (lens/control.h), found through the run directory's
// control.json (address, port and token, written by rank 0 at setup, readable by the job's user only).
//
//   lens ctl RUN_DIR status                       the span groups now, the iteration, the world size
//   lens ctl RUN_DIR span-groups SPEC [--for N]   switch every rank at the next iteration boundary
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lens_tools {

// What control.json says: where the endpoint listens and its token.
struct ControlFile {
  std::string address, token;
  int port = 0;
};

// control.json's text read: nullopt with `why` when it is not a control file (not JSON, a field missing or of
// another type, an address or token with a space or control byte, a port outside 1..65535).
std::optional<ControlFile> parse_control_file(std::string_view text, std::string* why);

// Exit codes: 0 done; 1 refused by the job (a bad spec, a change already pending, a wrong token: its message on
// stderr); 2 no control.json under RUN_DIR, or the job does not answer.
int ctl_status(const std::string& run_dir);
int ctl_span_groups(const std::string& run_dir, const std::string& spec, std::int64_t iterations);

}  // namespace lens_tools
