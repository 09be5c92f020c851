// A self-signed certificate for 127.0.0.1 and localhost, made by `openssl` once per test program, for collectors
// that serve TLS. Empty paths when openssl could not make one.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace lens::testing {

struct SelfSigned {
  std::string cert_path, key_path;

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string cert() const { return read(cert_path); }
  std::string key() const { return read(key_path); }
};

inline const SelfSigned& self_signed() {
  static const SelfSigned files = [] {
    std::string dir = std::filesystem::temp_directory_path() / ("lens-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    SelfSigned f{dir + "/cert.pem", dir + "/key.pem"};
    std::string command =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
        "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
        f.key_path + " -out " + f.cert_path + " >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) f = {};
    return f;
  }();
  return files;
}

}  // namespace lens::testing
