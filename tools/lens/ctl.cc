#include "ctl.h"

#include <httplib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

namespace lens_tools {
namespace {

constexpr int kRefused = 1;
constexpr int kUnreachable = 2;

struct Endpoint {
  std::string address, token;
  int port = 0;
};

// control.json in RUN_DIR, or in the one run directory below it.
bool find_endpoint(const std::string& run_dir, Endpoint& out) {
  namespace fs = std::filesystem;
  fs::path file = fs::path(run_dir) / "control.json";
  std::error_code error;
  if (!fs::is_regular_file(file, error)) {
    for (const auto& entry : fs::directory_iterator(run_dir, error))
      if (fs::is_regular_file(entry.path() / "control.json", error)) file = entry.path() / "control.json";
  }
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr,
                 "lens ctl: no control.json under %s: the job runs without P_CONTROL=1, has ended, or this is "
                 "not rank 0's run directory\n",
                 run_dir.c_str());
    return false;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    out = {j.at("address").get<std::string>(), j.at("token").get<std::string>(), j.at("port").get<int>()};
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lens ctl: %s is not a control file: %s\n", file.c_str(), e.what());
    return false;
  }
}

int answer(const httplib::Result& result, const Endpoint& e) {
  if (!result) {
    std::fprintf(stderr, "lens ctl: the job does not answer on %s:%d (%s): it has ended or hangs\n", e.address.c_str(),
                 e.port, httplib::to_string(result.error()).c_str());
    return kUnreachable;
  }
  if (result->status >= 200 && result->status < 300) {
    std::cout << result->body;
    return 0;
  }
  std::string message = result->body;
  try {
    message = nlohmann::json::parse(result->body).at("error").get<std::string>();
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "lens ctl: refused (%d): %s\n", result->status, message.c_str());
  return kRefused;
}

httplib::Client client(const Endpoint& e) {
  httplib::Client c(e.address, e.port);
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  c.set_bearer_token_auth(e.token);
  return c;
}

}  // namespace

int ctl_status(const std::string& run_dir) {
  Endpoint e;
  if (!find_endpoint(run_dir, e)) return kUnreachable;
  return answer(client(e).Get("/status"), e);
}

int ctl_span_groups(const std::string& run_dir, const std::string& spec, std::int64_t iterations) {
  Endpoint e;
  if (!find_endpoint(run_dir, e)) return kUnreachable;
  httplib::Params query{{"spec", spec}};
  if (iterations > 0) query.emplace("for", std::to_string(iterations));
  const std::string path = httplib::append_query_params("/span-groups", query);
  return answer(client(e).Post(path), e);
}

}  // namespace lens_tools
