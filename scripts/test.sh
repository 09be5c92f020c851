#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the full build with ctest, then the core and concurrent
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer, the concurrent tests under ThreadSanitizer,
# and the parsers' libFuzzer target for a bounded time (clang). Ends with how many tests ran per label, and
# fails if a label the configuration promised ran none.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test: installs what is missing, builds four configurations (full, ASan+UBSan, TSan, libFuzzer), checks the"
echo "test: style and runs every test; about 20 minutes on 2 cores from scratch (packages, the Go test peers, four builds,"
echo "test: the tests)"
./scripts/setup-deps.sh

jobs=$(nproc)
summary=()
build() {  # build <dir> <cmake args...>: warnings are errors
  local dir=$1
  shift
  echo "== configure and build $dir"
  cmake -S . -B "$dir" -G Ninja -Wno-dev -DLENS_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}
run_tests() {  # run_tests <dir> <title> <labels that must run> -- <ctest args...>
  local dir=$1 title=$2 labels=()
  shift 2
  while [ "$1" != "--" ]; do labels+=("$1"); shift; done
  shift
  rm -f "$dir/junit.xml"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --output-junit junit.xml "$@"
  summary+=("$(./scripts/tests_per_label.py "$dir" "$dir/junit.xml" "$title" "${labels[@]}")") || {
    printf '%s\n' "${summary[@]}"
    exit 1
  }
}

echo "== full build and tests"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
mapfile -t promised <build/lens_promised_labels.txt
run_tests build "full" "${promised[@]}" --

# A test that writes into the source tree (a default ./telemetry under its working directory) would dirty every
# checkout it runs in, and its files could be committed: what is left there, neither tracked nor ignored, fails.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  left=$(git status --porcelain --untracked-files=all | grep '^??' || true)
  if [ -n "$left" ]; then
    echo "test: the tests left files in the source tree:"
    echo "$left"
    exit 1
  fi
fi

echo "== style: clang-format, clang-tidy, flake8 and the include and architecture checks on every folder"
./scripts/style.sh build

echo "== core and concurrent tests under ASan+UBSan (a race that frees memory shows here as a use after free)"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_tests build-asan "asan" core concurrent -- -L "core|concurrent"

echo "== concurrent tests under TSan"
build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=thread
TSAN_OPTIONS=halt_on_error=1 run_tests build-tsan "tsan" concurrent -- -L concurrent

echo "== the parsers under libFuzzer (clang, ASan+UBSan; 60 s)"
build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=address,undefined -DLENS_FUZZ=ON
run_tests build-fuzz "fuzz" fuzz -- -L fuzz

echo "== tests run per label (full build; asan: core and concurrent under ASan+UBSan; tsan: concurrent under TSan;"
echo "   fuzz: libFuzzer)"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | awk '/ passed, / { p += $2; f += $4; s += $6 }
  END { printf "total: %d passed, %d failed, %d skipped\n", p, f, s }'
