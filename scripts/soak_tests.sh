#!/usr/bin/env bash
# Runs the tests of one ctest label N times with two busy loops (`yes >/dev/null`) beside them, the load a shared CI
# machine adds, and prints how many runs each test passed. A test whose verdict depends on the machine's speed or
# load shows here as fewer than N passes.
#
#   ./scripts/soak_tests.sh straggler 20            # after a build of build/ (./scripts/test.sh makes one)
#   ./scripts/soak_tests.sh multiprocess 20 build   # the build directory may be named; the default is build
#   SOAK_BUSY_LOOPS=0 ./scripts/soak_tests.sh deploy 5   # without the loops
#   ./scripts/soak_tests.sh 'deploy|jaeger' 20          # several labels, run together as test.sh runs them
#
# Each run is one `ctest -L LABEL -j $(nproc)` as scripts/test.sh runs it (RUN_SERIAL tests alone). A failed run's
# output is kept in BUILD/soak/LABEL/run-K.log. Exit status: 0 every test passed every run, 1 one did not, 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
label=$1 runs=$2 dir=${3:-build}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "soak_tests: N must be a positive whole number, not '$runs'" >&2; exit 2; }
[ -f "$dir/CTestTestfile.cmake" ] || { echo "soak_tests: no ctest build in '$dir' (run ./scripts/test.sh first)" >&2; exit 2; }
if ! ctest --test-dir "$dir" -N -L "^($label)\$" | grep -q 'Total Tests: [1-9]'; then
  echo "soak_tests: no test of '$dir' is labelled '$label'" >&2
  exit 2
fi

loops=()
stop_loops() {
  if [ ${#loops[@]} -gt 0 ]; then kill "${loops[@]}" 2>/dev/null || true; fi
}
trap stop_loops EXIT
for _ in $(seq 1 "${SOAK_BUSY_LOOPS:-2}"); do
  yes >/dev/null &
  loops+=($!)
done

out="$(cd "$dir" && pwd)/soak/${label//|/+}"
rm -rf "$out" && mkdir -p "$out"
for run in $(seq 1 "$runs"); do
  start=$SECONDS
  rm -rf "$out/tmp" && mkdir -p "$out/tmp"  # its own: a test.sh run of the same build may be using test-tmp
  if TEST_TMPDIR="$out/tmp" ctest --test-dir "$dir" -L "^($label)\$" -j "$(nproc)" --output-on-failure \
    --output-junit "$out/run-$run.xml" >"$out/run-$run.log" 2>&1; then
    verdict=passed
    rm -f "$out/run-$run.log"
  else
    verdict="FAILED (log: $out/run-$run.log)"
  fi
  echo "soak_tests: $label run $run of $runs $verdict in $((SECONDS - start)) s (${#loops[@]} busy loops beside it)"
done

python3 - "$out" "$runs" "$label" <<'EOF'
import collections, glob, sys
import xml.etree.ElementTree as ElementTree

out, runs, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
passed, skipped, seen = collections.Counter(), collections.Counter(), collections.Counter()
for junit in glob.glob(f"{out}/run-*.xml"):
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        seen[case.get("name")] += 1
        passed[case.get("name")] += case.get("status") == "run"
        skipped[case.get("name")] += case.get("status") in ("notrun", "disabled")
width = max(len(name) for name in seen)
for name in sorted(seen):
    print(f"{name:<{width}}  {passed[name]} of {runs} passed" + (f", {skipped[name]} skipped" if skipped[name] else ""))
short = [name for name in seen if passed[name] + skipped[name] < runs]
print(f"soak_tests: {label}: {len(seen) - len(short)} of {len(seen)} tests passed all {runs} runs")
sys.exit(1 if short else 0)
EOF
