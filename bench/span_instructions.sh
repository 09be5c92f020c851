#!/usr/bin/env bash
# Instructions a span on the calling thread, per case of bench/span_instructions.cc, under callgrind: repeatable to
# the instruction, so two builds compare exactly where their wall clocks on a VM do not. Usage:
#   bench/span_instructions.sh [build directory, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target lens_span_instructions >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
summary=$(valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/callgrind.out" \
  "$build/bench/lens_span_instructions" 2>/dev/null)
echo "$summary"
spans=$(sed -n 's/.*each case \([0-9]*\) spans.*/\1/p' <<<"$summary")
main_thread=$(ls "$out"/callgrind.out*-01)
# Each case function's inclusive count: the largest figure on its lines (the others are its callees' shares).
callgrind_annotate --inclusive=yes --threshold=100 "$main_thread" 2>/dev/null |
  awk -v spans="$spans" 'match($0, /case_[a-z_]+\(\)/) {
    name = substr($0, RSTART + 5, RLENGTH - 7); count = $1; gsub(",", "", count)
    if (count + 0 > best[name]) best[name] = count + 0
  } END { for (name in best) printf "%-22s %7.1f instructions a span\n", name, best[name] / spans }' | sort
