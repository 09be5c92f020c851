#!/usr/bin/env bash
# lens beside the OpenTelemetry C++ SDK (bench/otel_cpp_side_by_side.cc): builds the benchmark against an SDK already
# installed under PREFIX, runs it free (15 repetitions) and pinned to one core (10), and prints a table a round: each
# row's medians on both, the ratio, the drop ratios and the floor, then whether each bar of docs/PERFORMANCE.md holds.
# The SDK itself is neither fetched nor built here: PREFIX is an install of its release (docs/PERFORMANCE.md says which).
#   bench/otel_cpp_side_by_side.sh PREFIX [ROUNDS, default 3] [BUILD_DIR, default build-otel-cpp]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:?usage: bench/otel_cpp_side_by_side.sh PREFIX [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
build=${3:-build-otel-cpp}
cmake -S . -B "$build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLENS_BUILD_TESTS=OFF \
  -DLENS_OTEL_CPP_PREFIX="$prefix" >/dev/null
cmake --build "$build" --target lens_otel_cpp_side_by_side >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)"
run() {  # run JSON REPETITIONS [taskset arguments]
  local json=$1 repetitions=$2
  shift 2
  "$@" "$build/bench/lens_otel_cpp_side_by_side" --benchmark_repetitions="$repetitions" --benchmark_min_time=0.2 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_format=json --benchmark_out="$json" >/dev/null 2>&1
}
status=0
for round in $(seq "$rounds"); do
  run "$out/free.json" 15
  run "$out/pinned.json" 10 taskset -c 0
  echo
  echo "round $round"
  python3 bench/otel_cpp_side_by_side_table.py "$out/free.json" "$out/pinned.json" || status=1
done
exit $status
