#!/usr/bin/env bash
# Builds and runs the benchmarks; prints medians (each beside the baseline measured in the same run).
# Figures and the machine they came from are kept in docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh >/dev/null
cmake -S . -B build -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target lens_benchmarks lens_pipeline_benchmark lens_keep_benchmark lens_otlp_benchmark \
  lens_export_benchmark lens_control_benchmark lens_hang_benchmark >/dev/null
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)"
./build/bench/lens_benchmarks --benchmark_repetitions=15 --benchmark_min_time=0.2 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true "$@" \
  2>&1 | grep -E "^Benchmark|_median|^Run on"
echo
./build/bench/lens_pipeline_benchmark 2>&1 | grep -E "^BM_"
echo
./build/bench/lens_keep_benchmark --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 \
  | grep -E "_median"
echo
./build/bench/lens_otlp_benchmark --benchmark_repetitions=15 --benchmark_min_time=0.2 \
  --benchmark_report_aggregates_only=true 2>&1 | grep -E "^Benchmark|_median"
echo
./build/bench/lens_export_benchmark --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 \
  | grep -E "^Benchmark|_median"
echo
for program in lens_control_benchmark lens_hang_benchmark; do
  ./build/bench/$program --benchmark_repetitions=15 --benchmark_min_time=0.2 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true 2>&1 \
    | grep -E "^Benchmark|_median"
done
