#include "ctl.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/files.h"
#include "common/text.h"

namespace lens_tools {
namespace {

constexpr int kRefused = 1;
constexpr int kUnreachable = 2;

// What an answer may be: a status is a few hundred bytes. Past either bound the request is given up.
constexpr std::size_t kMaxAnswerBytes = 64 << 10;
constexpr std::chrono::seconds kDeadline{15};

// Text lens wrote into control.json: printable ASCII, no space or control byte (a CR/LF in the token would have
// become a header of its own).
bool is_plain_token(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// control.json in RUN_DIR, or in the one run directory below it: a regular file of a control file's size, read
// without following a link or blocking (a FIFO or /dev/zero planted there is refused, never read).
bool find_endpoint(const std::string& run_dir, ControlFile& out) {
  namespace fs = std::filesystem;
  fs::path file = fs::path(run_dir) / "control.json";
  std::error_code error;
  if (!fs::exists(fs::symlink_status(file, error))) {
    for (const auto& entry : fs::directory_iterator(run_dir, error))
      if (fs::exists(fs::symlink_status(entry.path() / "control.json", error))) file = entry.path() / "control.json";
  }
  const std::optional<std::string> text = lens::internal::read_regular_file(file, lens::internal::kMaxControlFileBytes);
  if (!text) {
    std::fprintf(stderr,
                 "lens ctl: no control.json under %s (or not a regular file of at most %zu bytes): the job runs "
                 "without MEGATRON_OTEL_CONTROL=1, has ended, or this is not rank 0's run directory\n",
                 run_dir.c_str(), lens::internal::kMaxControlFileBytes);
    return false;
  }
  std::string why;
  std::optional<ControlFile> parsed = parse_control_file(*text, &why);
  if (!parsed) {
    std::fprintf(stderr, "lens ctl: %s is not a control file: %s\n", file.c_str(),
                 lens::internal::printable_excerpt(why).c_str());
    return false;
  }
  out = std::move(*parsed);
  return true;
}

int answer(const httplib::Result& result, const std::string& body, const ControlFile& e) {
  if (!result) {
    const bool gave_up = result.error() == httplib::Error::Canceled;
    std::fprintf(stderr, "lens ctl: %s %s:%d (%s)\n",
                 gave_up ? "gave up on the answer of" : "the job does not answer on", e.address.c_str(), e.port,
                 gave_up ? "longer than 64 KiB or slower than 15 s: not lens's control endpoint?"
                         : (httplib::to_string(result.error()) + ": it has ended or hangs").c_str());
    return kUnreachable;
  }
  if (result->status >= 200 && result->status < 300) {
    std::cout << body;
    return 0;
  }
  std::string message = body;
  try {
    message = nlohmann::json::parse(body).at("error").get<std::string>();
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "lens ctl: refused (%d): %s\n", result->status,
               lens::internal::printable_excerpt(message).c_str());
  return kRefused;
}

// One request: at most kMaxAnswerBytes of answer, within kDeadline whatever the endpoint does.
int request(const ControlFile& e, const char* method, const std::string& path) {
  httplib::Client c(e.address, e.port);
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  c.set_bearer_token_auth(e.token);
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  httplib::Request r;
  r.method = method;
  r.path = path;
  r.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    if (body.size() + n > kMaxAnswerBytes || std::chrono::steady_clock::now() > deadline) return false;
    body.append(data, n);
    return true;
  };
  return answer(c.send(r), body, e);
}

}  // namespace

std::optional<ControlFile> parse_control_file(std::string_view text, std::string* why) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    ControlFile out{j.at("address").get<std::string>(), j.at("token").get<std::string>(), j.at("port").get<int>()};
    if (!is_plain_token(out.address) || !is_plain_token(out.token) || out.port < 1 || out.port > 65535)
      throw std::invalid_argument("address, token or port out of range");
    return out;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

int ctl_status(const std::string& run_dir) {
  ControlFile e;
  if (!find_endpoint(run_dir, e)) return kUnreachable;
  return request(e, "GET", "/status");
}

int ctl_span_groups(const std::string& run_dir, const std::string& spec, std::int64_t iterations) {
  ControlFile e;
  if (!find_endpoint(run_dir, e)) return kUnreachable;
  httplib::Params query{{"spec", spec}};
  if (iterations > 0) query.emplace("for", std::to_string(iterations));
  const std::string path = httplib::append_query_params("/span-groups", query);
  return request(e, "POST", path);
}

}  // namespace lens_tools
