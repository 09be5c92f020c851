#!/usr/bin/env bash
# Telemetry overhead of the reference trainer, with telemetry off, `default`, `per_step` and `all` (files, every
# rank exporting), three ways. Figures and the machine: docs/PERFORMANCE.md.
#  1. The demo's 4-rank run (PP=2 x DP=2), in rounds that run the four in a rotated order, so each configuration
#     is paired with an `off` run of the same moment: per configuration, the median of the per-round ratios to
#     `off` of the steady-state time per iteration (the first 10 iterations left out).
#  2. pretrain_gpt_benchmark: train steps of one rank in one process, the groups switched between the cases,
#     12 repetitions interleaved at random: medians of wall and process CPU time per step.
#  3. The same steps counted in instructions under callgrind (all threads, the export of their telemetry
#     included), which a shared machine's noise does not touch; skipped when valgrind is not installed.
#
# With --python, the same 4-rank measure (1. only) of the Python trainer, examples/python/pretrain_gpt.py.
#
#   ./scripts/trainer_overhead.sh [--python] [rounds=5] [iterations=60]
set -euo pipefail
cd "$(dirname "$0")/.."
program=(./build/trainer/pretrain_gpt)
python_trainer=false
if [ "${1:-}" = "--python" ]; then
  python_trainer=true
  program=(.venv/bin/python examples/python/pretrain_gpt.py)  # opentelemetry-api: the trainer's job spans use it
  export PYTHONPATH="$PWD/build/python"
  shift
fi
rounds=${1:-5}
iters=${2:-60}
cmake --build build --target pretrain_gpt pretrain_gpt_benchmark lens_python_package >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run <name> <groups or "off"> -> prints ms per iteration after iteration 10
  local groups=$2 port=$((29600 + RANDOM % 300)) pids=()
  for rank in 0 1 2 3; do
    env RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      MEGATRON_OTEL_EXPORTER=file MEGATRON_OTEL_FILE_DIR="$work/telemetry" MEGATRON_OTEL_RANK_STRATEGY=all_ranks \
      MEGATRON_OTEL_ENABLED=$([ "$groups" = off ] && echo 0 || echo 1) \
      MEGATRON_OTEL_SPAN_GROUPS=$([ "$groups" = off ] && echo default || echo "$groups") \
      "${program[@]}" --pipeline-model-parallel-size 2 --train-iters "$iters" --log-interval 10 \
      >"$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  # Mean of the logged per-iteration times of the intervals after the first (warm-up) one.
  sed -n 's/.*iteration *\([0-9]*\)\/.*per iteration (ms): \([0-9.]*\).*/\1 \2/p' "$work/rank3.out" |
    awk '$1 > 10 { s += $2; n++ } END { printf "%.2f\n", s / n }'
}

configs=(off default per_step all)
echo "trainer: ${program[*]}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F); $rounds rounds of $iters iterations"
results="$work/results"
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < 4; k++)); do
    c=${configs[$(((k + r) % 4))]}
    echo "$r $c $(run "$r" "$c")" | tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
by_round = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, config, ms = line.split()
    by_round[r][config] = float(ms)
print(f"{'config':>10} {'median ms/iter':>15} {'median ratio to off':>20}")
for config in ("off", "default", "per_step", "all"):
    ms = statistics.median(v[config] for v in by_round.values())
    ratio = statistics.median(v[config] / v["off"] for v in by_round.values())
    print(f"{config:>10} {ms:15.1f} {ratio:20.4f}")
PY
$python_trainer && exit 0

echo
echo "pretrain_gpt_benchmark: one rank, 12 interleaved repetitions of 3 steps per case (medians)"
./build/trainer/pretrain_gpt_benchmark --benchmark_repetitions=12 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true 2>&1 | grep -E "^Benchmark|_median"

echo
if ! command -v valgrind >/dev/null; then
  echo "instructions per step: skipped (apt-get install valgrind)"
  exit 0
fi
echo "instructions per step under callgrind (the 3 steps of each case and the export of their telemetry, / 3)"
for c in off default per_step all; do
  valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.$c" \
    ./build/trainer/pretrain_gpt_benchmark --benchmark_filter="BM_TrainStep/$c/" >"$work/callgrind.$c.log" 2>&1 &
  [ "$c" = default ] || [ "$c" = all ] && wait  # two at a time: the counts do not depend on the load
done
python3 - "$work" <<'PY'
import re, sys
counts = {}
for c in ("off", "default", "per_step", "all"):
    text = open(f"{sys.argv[1]}/callgrind.{c}.1").read()  # the dump the benchmark asked for
    counts[c] = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1)) / 3
print(f"{'config':>10} {'instructions/step':>18} {'ratio to off':>13}")
for c, n in counts.items():
    print(f"{c:>10} {n:18,.0f} {n / counts['off']:13.6f}")
PY
