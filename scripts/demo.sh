#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: pretrain_gpt, the reference trainer, on 4 ranks
# (2 pipeline stages x 2 data-parallel replicas) under torchrun, for 100 iterations with evaluations and
# checkpoints written by checkpoint worker processes (--async-save), gradient buckets all-reduced during
# backward (--overlap-grad-reduce), telemetry on with every span group, every rank exporting to files (the
# embedded default exporter of the demo). Then prints where the run's telemetry is and `lens report` of it (span
# counts and durations per name, step times per rank, phases, stragglers, the pipeline bubble, the loss, what was
# lost), and writes the report as an HTML page and the run as Chrome JSON for Perfetto UI.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: trains a small GPT with pretrain_gpt on 4 ranks under torchrun (100 iterations, every span group on) and"
echo "demo: writes its telemetry to OTLP/JSON Lines files. On 2 cores: about 5 minutes the first time (installing"
echo "demo: packages, then building the trainer), under 2 minutes after that."
./scripts/setup-deps.sh

echo "demo: building pretrain_gpt, the lens command and the Python package (the first build takes 3 to 4 minutes on 2"
echo "demo: cores; output in build/demo-build.log)"
build_log=build/demo-build.log
mkdir -p build
# The same configuration as scripts/test.sh's full build (warnings are errors there), so that the tests after the
# demo reuse what it compiled instead of compiling it again with other flags. The Python package (build/python) too:
# the docs' commands after this one use it.
if ! { cmake -S . -B build -G Ninja -Wno-dev -DLENS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build build --target pretrain_gpt lens_tool lens_python_package; } >"$build_log" 2>&1; then
  tail -40 "$build_log"
  echo "demo: the build failed; the whole log is in $build_log"
  exit 1
fi
echo "demo: running 100 iterations on 4 ranks (about 30 seconds on 2 cores)"

out_dir=$(pwd)/build/demo
rm -rf "$out_dir" && mkdir -p "$out_dir"
log="$out_dir/pretrain_gpt.log"
# torchrun 1.13 under Python 3.11: --redirects/--tee avoid its Std.from_str crash; --monitor_interval shortens
# its teardown.
MEGATRON_OTEL_EXPORTER=${MEGATRON_OTEL_EXPORTER:-file} MEGATRON_OTEL_FILE_DIR="$out_dir/telemetry" \
  MEGATRON_OTEL_RANK_STRATEGY=${MEGATRON_OTEL_RANK_STRATEGY:-all_ranks} \
  torchrun --nproc_per_node 4 --no_python --redirects 9:0 --tee 9:0 --monitor_interval 0.2 \
  --master_port "${MASTER_PORT:-29500}" \
  ./build/trainer/pretrain_gpt --pipeline-model-parallel-size 2 --num-layers 4 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --micro-batch-size 4 --global-batch-size 16 --train-iters 100 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --log-interval 10 --log-throughput --eval-interval 50 \
  --eval-iters 4 --save "$out_dir/checkpoints" --save-interval 50 --async-save \
  --overlap-grad-reduce --ddp-bucket-size 25000 \
  --otel-enabled --otel-span-groups "${MEGATRON_OTEL_SPAN_GROUPS:-all}" "$@" 2>&1 | tee "$log"

run_dir=$(ls -d "$out_dir"/telemetry/*/ | head -1)
echo
echo "demo: the run's telemetry is in $run_dir (OTLP/JSON Lines: rank<R>.traces.jsonl, rank<R>.metrics.jsonl)"
echo "demo: checkpoints in $out_dir/checkpoints, the trainer's output in $log"
echo "demo: lens report $run_dir --steps 95-100 (the run's files read with no server; --json for scripts):"
./build/tools/lens report "$run_dir" --steps 95-100 | sed 's/^/  /'
./build/tools/lens report "$run_dir" --html "$out_dir/report.html" >/dev/null 2>&1
./build/tools/lens convert "$run_dir" --to chrome-json -o "$out_dir/trace.json.gz" 2>/dev/null
echo "demo: the report as a page (timeline of the last two iterations, step time and loss over the run): open"
echo "  $out_dir/report.html"
echo "demo: the whole run for Perfetto UI (ui.perfetto.dev, Open trace file):"
echo "  $out_dir/trace.json.gz"
echo "demo: what became of the spans, per rank (nothing dropped is the expectation, with every group on):"
grep -E "lens: spans:" "$log" | sed 's/^\[[0-9]*\]://; s/^/  /'
echo "demo: final losses:"
grep -E "validation loss|done:" "$log" | sed 's/^\[[0-9]*\]://; s/^/  /'
