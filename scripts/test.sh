#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the full build with ctest, then the core tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the concurrent tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh

jobs=$(nproc)
build() {  # build <dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -Wno-dev "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

echo "== full build and tests"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== core tests under ASan+UBSan"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L core

echo "== concurrent tests under TSan"
build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=thread
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L concurrent
