#!/usr/bin/env bash
# Installs every Debian package that lens's build, tests, benchmarks and demo use, each one named: packages are
# installed with --no-install-recommends, so nothing arrives by recommendation, and the `setup` tests check
# that every header, library and program the build read belongs to this list or to its Depends: closure.
# Idempotent and quick when all are present: apt-get update runs only when something is missing.
#   --list   print the package names, one per line, and do nothing else (read by tests/setup)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config binutils  # toolchain (binutils: nm, for the LENS_DISABLED test)
  python3                                    # the scripts' and the setup check's small helpers
  python3-venv                               # .venv: the PyPI test peers (OpenTelemetry Python), pinned with hashes
  nodejs                                     # runs the npm test peers (tests/peers; npm comes with it)
  chromium                                   # lens report's HTML page is tested in it, headless (playwright-core)
  libssl-dev                                 # md5 for the `sampled` rank rule; sha1 for run uuids
  libcurl4-openssl-dev zlib1g-dev            # OTLP over HTTP, gzip
  libgrpc++-dev                              # OTLP over gRPC (generic stub: no generated code)
  openssl                                    # tests make a self-signed certificate for OTLP over TLS
  libgtest-dev libgmock-dev                  # tests
  clang libclang-rt-14-dev                   # the libFuzzer build of the parser fuzz target (tests, label fuzz)
  clang-format clang-tidy                    # scripts/style.sh: the formatting and lint gate of scripts/test.sh
  flake8                                     # scripts/style.sh: every Python file (.flake8)
  libbenchmark-dev                           # benchmarks
  valgrind                                   # callgrind.h: the trainer benchmark counts instructions under callgrind
  libcli11-dev                               # command-line flags of the examples, the trainer and tools
  nlohmann-json3-dev                         # tests read exported OTLP/JSON back; lens report's --json
  libsimdjson-dev                            # lens report reads a run's files (streaming, On-Demand)
  libmicrohttpd-dev                          # the Prometheus /metrics endpoint (event-driven, bounded)
  libcpp-httplib-dev                         # lens ctl's HTTP client; HTTP clients and misbehaving collectors in the tests
  libspdlog-dev                              # the spdlog sink (tests and examples)
  prometheus                                 # a real Prometheus server scrapes lens in the tests
  python3-dev pybind11-dev                   # the Python package (a CPython extension for /usr/bin/python3)
  python3-torch libtorch-dev libgloo-dev     # LibTorch (libtorch-dev: headers, TorchConfig.cmake; python3-torch
                                             # only recommends it), c10d Gloo, torchrun: pretrain_gpt and the demo
  iproute2 util-linux                        # the multi-node test: ip (veth links, a bridge), unshare and nsenter
  python3-yaml                               # the deploy/ test reads the shipped Collector configurations
)

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
else
  echo "setup-deps: installing ${#missing[@]} Debian packages (a minute or two on a fresh machine): ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup-deps: installed"
fi

# Go is part of the machine (the polyglot kind's /usr/local/go); Debian's golang is too old for the Collector.
# LENS_GO names another go program (the setup test names one that is not there).
go_program="${LENS_GO:-$(command -v go || true)}"
[ -z "$go_program" ] && [ -x /usr/local/go/bin/go ] && go_program=/usr/local/go/bin/go
if [ ! -x "$go_program" ]; then
  echo "setup-deps: Go (1.26 or newer) is missing: the Collector and Jaeger test peers are built from the Go module" >&2
  echo "setup-deps: proxy with it. Install Go at /usr/local/go (it comes with the polyglot machine kind)." >&2
  exit 1
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
peers_bin="$root/tests/peers/bin"
mkdir -p "$peers_bin"

# A Go test peer, built once from its pinned module (go.mod + go.sum: exact versions and checksums) and again only
# when they change. -mod=readonly: a go.mod that does not already say every version is an error, not an upgrade.
build_go_peer() {  # build_go_peer <module dir> <program> <package>
  local dir="$root/tests/peers/$1" out="$peers_bin/$2" stamp="$peers_bin/.$2.inputs"
  local inputs
  inputs="$(find "$dir" -maxdepth 1 \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z |
    xargs -0 cat | sha256sum | cut -d' ' -f1)"
  if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$inputs" ]; then
    return
  fi
  echo "setup-deps: building the test peer $2 from tests/peers/$1 (Go modules pinned in go.sum; minutes the first time)"
  (cd "$dir" && GOFLAGS="-mod=readonly -buildvcs=false" "$go_program" build -trimpath -o "$out.tmp" "$3")
  mv "$out.tmp" "$out"
  echo "$inputs" >"$stamp"
}
build_go_peer otelcol otelcol-lens .
build_go_peer jaeger jaeger github.com/jaegertracing/jaeger/cmd/jaeger

# The PyPI test peers, exact versions and hashes, in a venv that sees Debian's site-packages (torch, numpy).
venv="$root/.venv"
requirements="$root/tests/peers/python/requirements.txt"
if [ ! -f "$venv/.lens-installed" ] || [ "$requirements" -nt "$venv/.lens-installed" ]; then
  echo "setup-deps: installing the PyPI test peers into .venv (tests/peers/python/requirements.txt, hashed)"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps --ignore-installed \
    -r "$requirements"
  touch "$venv/.lens-installed"
fi

# What building and installing the wheels needs (python/build-requirements.txt: the build backend, pybind11,
# auditwheel, the wheel's dependency) and the real NeMo Lens for the parity tests
# (tests/peers/python/parity-requirements.txt): exact versions and hashes, as wheels in .wheelhouse.
wheelhouse="$root/.wheelhouse"
wheel_requirements=("$root/python/build-requirements.txt" "$root/tests/peers/python/parity-requirements.txt")
if [ ! -f "$wheelhouse/.lens-downloaded" ] || [ "${wheel_requirements[0]}" -nt "$wheelhouse/.lens-downloaded" ] ||
   [ "${wheel_requirements[1]}" -nt "$wheelhouse/.lens-downloaded" ]; then
  echo "setup-deps: downloading the wheels' build tools and the parity tests' NeMo Lens into .wheelhouse (hashed)"
  for requirements in "${wheel_requirements[@]}"; do  # NeMo Lens needs 3.13, this pip is 3.11's: exact pins anyway
    "$venv/bin/pip" download --quiet --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \
      --ignore-requires-python -d "$wheelhouse" -r "$requirements"
  done
  touch "$wheelhouse/.lens-downloaded"
fi

# NVTX v3's headers (cmake/nvtx-requirements.txt: NVIDIA's nvidia-nvtx wheel, exact version and hash), unpacked into
# .deps/nvtx/include/nvtx3 for src/device/nvtx.cc.
nvtx_requirements="$root/cmake/nvtx-requirements.txt"
nvtx_dir="$root/.deps/nvtx"
if [ ! -f "$nvtx_dir/.lens-unpacked" ] || [ "$nvtx_requirements" -nt "$nvtx_dir/.lens-unpacked" ]; then
  echo "setup-deps: downloading NVTX v3's headers into .deps/nvtx (hashed)"
  rm -rf "$nvtx_dir" && mkdir -p "$nvtx_dir/wheel"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \
    -d "$nvtx_dir/wheel" -r "$nvtx_requirements"
  /usr/bin/python3 - "$nvtx_dir" <<'PY'
import glob, os, sys, zipfile
out = sys.argv[1]
(wheel,) = glob.glob(os.path.join(out, "wheel", "*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        at = name.find("/include/nvtx3/")
        if at >= 0 and not name.endswith("/"):
            target = os.path.join(out, "include", name[at + len("/include/"):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
PY
  touch "$nvtx_dir/.lens-unpacked"
fi

# The npm test peers (exact versions, with their dependencies, in tests/peers/package-lock.json), installed once.
peers="$(dirname "$0")/../tests/peers"
if [ ! -f "$peers/node_modules/.lens-installed" ] || [ "$peers/package-lock.json" -nt "$peers/node_modules/.lens-installed" ]; then
  echo "setup-deps: installing the npm test peers (tests/peers: exactly its package-lock.json)"
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.lens-installed)
fi
