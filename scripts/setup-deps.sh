#!/usr/bin/env bash
# Installs every Debian package that lens's build, tests and demo need. Idempotent and quick when all are
# present: apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config binutils  # toolchain (binutils: nm, for the LENS_DISABLED test)
  libssl-dev                                 # md5 for the `sampled` rank rule; sha1 for run uuids
  libgtest-dev libgmock-dev                  # tests
  libbenchmark-dev                           # benchmarks
  libcli11-dev                               # command-line flags of the examples and tools
  nlohmann-json3-dev                         # tests read exported OTLP/JSON back
  libcpp-httplib-dev                         # the Prometheus /metrics endpoint
  libspdlog-dev                              # the spdlog sink (tests and examples)
  prometheus                                 # a real Prometheus server scrapes lens in the tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
