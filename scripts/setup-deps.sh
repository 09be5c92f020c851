#!/usr/bin/env bash
# Installs every Debian package that lens's build, tests and demo need. Idempotent and quick when all are
# present: apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config binutils  # toolchain (binutils: nm, for the LENS_DISABLED test)
  nodejs                                     # runs the npm test peers (tests/peers; npm comes with it)
  libssl-dev                                 # md5 for the `sampled` rank rule; sha1 for run uuids
  libcurl4-openssl-dev zlib1g-dev            # OTLP over HTTP, gzip
  libgrpc++-dev                              # OTLP over gRPC (generic stub: no generated code)
  openssl                                    # tests make a self-signed certificate for OTLP over TLS
  libgtest-dev libgmock-dev                  # tests
  libbenchmark-dev                           # benchmarks
  libcli11-dev                               # command-line flags of the examples and tools
  nlohmann-json3-dev                         # tests read exported OTLP/JSON back
  libcpp-httplib-dev                         # the Prometheus /metrics endpoint
  libspdlog-dev                              # the spdlog sink (tests and examples)
  prometheus                                 # a real Prometheus server scrapes lens in the tests
  python3-torch libgloo-dev                  # LibTorch and c10d Gloo for pretrain_gpt, the reference trainer
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
else
  echo "setup-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The npm test peers (exact versions in tests/peers/package.json), installed once into tests/peers.
peers="$(dirname "$0")/../tests/peers"
if [ ! -f "$peers/node_modules/.lens-installed" ] || [ "$peers/package.json" -nt "$peers/node_modules/.lens-installed" ]; then
  echo "setup-deps: installing the npm test peers"
  (cd "$peers" && npm install --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.lens-installed)
fi
