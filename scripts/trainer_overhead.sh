#!/usr/bin/env bash
# Telemetry overhead of the reference trainer: the same 4-rank run (PP=2 x DP=2, the demo model) with telemetry
# off, `default`, `per_step` and `all` (every rank exporting to files), in rounds that run the four in a rotated
# order, so each configuration is paired with an `off` run of the same moment. Prints, per configuration, the
# median of the per-round ratios to `off` of the steady-state time per iteration (the first 10 iterations left
# out). Figures and the machine: docs/PERFORMANCE.md.
#
#   ./scripts/trainer_overhead.sh [rounds=5] [iterations=60]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
iters=${2:-60}
cmake --build build --target pretrain_gpt >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run <name> <groups or "off"> -> prints ms per iteration after iteration 10
  local groups=$2 port=$((29600 + RANDOM % 300)) pids=()
  for rank in 0 1 2 3; do
    env RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      MEGATRON_OTEL_EXPORTER=file MEGATRON_OTEL_FILE_DIR="$work/telemetry" MEGATRON_OTEL_RANK_STRATEGY=all_ranks \
      MEGATRON_OTEL_ENABLED=$([ "$groups" = off ] && echo 0 || echo 1) \
      MEGATRON_OTEL_SPAN_GROUPS=$([ "$groups" = off ] && echo default || echo "$groups") \
      ./build/trainer/pretrain_gpt --pipeline-model-parallel-size 2 --train-iters "$iters" --log-interval 10 \
      >"$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  # Mean of the logged per-iteration times of the intervals after the first (warm-up) one.
  sed -n 's/.*iteration *\([0-9]*\)\/.*per iteration (ms): \([0-9.]*\).*/\1 \2/p' "$work/rank3.out" |
    awk '$1 > 10 { s += $2; n++ } END { printf "%.2f\n", s / n }'
}

configs=(off default per_step all)
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
