#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the full build with ctest, then the core and concurrent
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer, the concurrent tests under ThreadSanitizer,
# and the parsers' libFuzzer target for a bounded time (clang). Ends with how many tests ran per label, and
# fails if a label the configuration promised ran none.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test: installs what is missing, builds four configurations (full, ASan+UBSan, TSan, libFuzzer), checks the"
echo "test: style and runs every test; about 40 minutes on 2 cores from scratch (packages, the Go test peers, four"
echo "test: builds, the tests; each phase's start is timed in the log)"
./scripts/setup-deps.sh

jobs=$(nproc)
summary=()
phase() {  # phase <title>: a line with the time since the start, so that a slow phase shows in CI's log
  printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"
}
build() {  # build <dir> [--target <target>]... <cmake args...>: warnings are errors; every target unless named
  local dir=$1 targets=()
  shift
  while [ "${1:-}" = "--target" ]; do targets+=("$1" "$2"); shift 2; done
  phase "configure and build $dir"
  cmake -S . -B "$dir" -G Ninja -Wno-dev -DLENS_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
}
show_fuzz_findings() {  # show_fuzz_findings <dir>: what libFuzzer found, last in the log (the tail CI shows)
  local finding
  for finding in "$1"/fuzz-findings/*; do
    [ -f "$finding" ] || continue
    echo "test: libFuzzer's finding $(basename "$finding") ($(stat -c %s "$finding") bytes), as base64:"
    head -c 4096 "$finding" | base64 -w 120
  done
  if [ -f "$1/Testing/Temporary/LastTest.log" ]; then
    echo "test: libFuzzer's report:"
    grep -E -A 12 '^==[0-9]+==|ERROR: libFuzzer|ALARM|SUMMARY' "$1/Testing/Temporary/LastTest.log" | head -60 || true
  fi
}
run_tests() {  # run_tests <dir> <title> <labels that must run> -- <ctest args...>
  local dir=$1 title=$2 labels=()
  shift 2
  while [ "$1" != "--" ]; do labels+=("$1"); shift; done
  shift
  rm -f "$dir/junit.xml"
  phase "tests of $dir"
  # gtest's TempDir(), where the C++ tests write their runs: under the build, emptied first, not in /tmp where every
  # run of the suite left hundreds of directories.
  rm -rf "$dir/test-tmp" && mkdir -p "$dir/test-tmp"
  TEST_TMPDIR="$PWD/$dir/test-tmp" ctest --test-dir "$dir" --output-on-failure -j "$jobs" --output-junit junit.xml \
    "$@" || {
    local status=$?
    show_fuzz_findings "$dir"
    exit $status
  }
  summary+=("$(./scripts/tests_per_label.py "$dir" "$dir/junit.xml" "$title" "${labels[@]}")") || {
    printf '%s\n' "${summary[@]}"
    exit 1
  }
}

phase "full build and tests"
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

phase "style: clang-format, clang-tidy, flake8 and the include and architecture checks on every folder"
./scripts/style.sh build

phase "core and concurrent tests under ASan+UBSan (a race that frees memory shows here as a use after free)"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_tests build-asan "asan" core concurrent -- -L "core|concurrent"

phase "concurrent tests under TSan (their program only: the core tests' would be built and never run)"
build build-tsan --target lens_concurrency_tests -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLENS_CORE_ONLY=ON \
  -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=thread
TSAN_OPTIONS=halt_on_error=1 run_tests build-tsan "tsan" concurrent -- -L concurrent

phase "the parsers under libFuzzer (clang, ASan+UBSan; 60 s)"
build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DLENS_CORE_ONLY=ON -DLENS_WITH_GRPC=OFF -DLENS_SANITIZE=address,undefined -DLENS_FUZZ=ON
run_tests build-fuzz "fuzz" fuzz -- -L fuzz

phase "tests run per label (full build; asan: core and concurrent under ASan+UBSan; tsan: concurrent under TSan;"
echo "   fuzz: libFuzzer)"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | awk '/ passed, / { p += $2; f += $4; s += $6 }
  END { printf "total: %d passed, %d failed, %d skipped\n", p, f, s }'
phase "done"
