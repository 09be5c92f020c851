#include "ctl.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
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

// What came back: the HTTP status (0: none), the body, and why there is none.
struct Answer {
  long status = 0;
  std::string body;
  std::size_t bytes = 0;  // headers and body together, against kMaxAnswerBytes
  CURLcode error = CURLE_OK;
};

// Headers and body count against one cap: an endless header block is given up as an endless body is.
std::size_t take_header(char*, std::size_t size, std::size_t n, void* to) {
  auto* a = static_cast<Answer*>(to);
  a->bytes += size * n;
  return a->bytes > kMaxAnswerBytes ? 0 : size * n;
}

std::size_t take_body(char* data, std::size_t size, std::size_t n, void* to) {
  auto* a = static_cast<Answer*>(to);
  a->bytes += size * n;
  if (a->bytes > kMaxAnswerBytes) return 0;
  a->body.append(data, size * n);
  return size * n;
}

int report(const Answer& a, const ControlFile& e) {
  if (a.error != CURLE_OK || a.status == 0) {
    const bool gave_up = a.error == CURLE_WRITE_ERROR || a.error == CURLE_OPERATION_TIMEDOUT;
    std::fprintf(stderr, "lens ctl: %s %s:%d (%s)\n",
                 gave_up ? "gave up on the answer of" : "the job does not answer on", e.address.c_str(), e.port,
                 gave_up ? "longer than 64 KiB or slower than 15 s, headers included: not lens's control endpoint?"
                         : (std::string(curl_easy_strerror(a.error)) + ": it has ended or hangs").c_str());
    return kUnreachable;
  }
  if (a.status >= 200 && a.status < 300) {
    std::cout << a.body;
    return 0;
  }
  std::string message = a.body;
  try {
    message = nlohmann::json::parse(a.body).at("error").get<std::string>();
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "lens ctl: refused (%ld): %s\n", a.status, lens::internal::printable_excerpt(message).c_str());
  return kRefused;
}

// One request with libcurl: at most kMaxAnswerBytes of answer (status line, headers and body) within kDeadline,
// whatever the endpoint sends or withholds (a header trickled a byte at a time included).
int request(const ControlFile& e, bool post, const std::string& path_and_query) {
  CURL* c = curl_easy_init();
  if (c == nullptr) {
    std::fprintf(stderr, "lens ctl: libcurl could not start a request\n");
    return kUnreachable;
  }
  const std::string url = "http://" + e.address + ":" + std::to_string(e.port) + path_and_query;
  const std::string authorization = "Authorization: Bearer " + e.token;
  curl_slist* headers = curl_slist_append(nullptr, authorization.c_str());
  Answer a;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");  // the endpoint is the job's own address
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::chrono::milliseconds(kDeadline).count()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, take_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
  if (post) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
  }
  a.error = curl_easy_perform(c);
  if (a.error == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  return report(a, e);
}

// What a query value escapes: everything but RFC 3986's unreserved characters.
bool reserved_in_query(unsigned char ch) {
  return !(std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~');
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
  return request(e, false, "/status");
}

int ctl_span_groups(const std::string& run_dir, const std::string& spec, std::int64_t iterations) {
  ControlFile e;
  if (!find_endpoint(run_dir, e)) return kUnreachable;
  std::string path = "/span-groups?spec=" + lens::internal::percent_encode(spec, reserved_in_query);
  if (iterations > 0) path += "&for=" + std::to_string(iterations);
  return request(e, true, path);
}

}  // namespace lens_tools
