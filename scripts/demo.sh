#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on the embedded default (the file exporter): until
# the reference trainer exists, the example consumer (examples/telemetry_from_env) with telemetry on and every
# span group enabled. Says where its output went.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh >/dev/null

cmake -S . -B build -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target telemetry_from_env >/dev/null

out_dir=build/demo
mkdir -p "$out_dir"
log="$out_dir/telemetry_from_env.txt"
MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_EXPORTER=${MEGATRON_OTEL_EXPORTER:-file} \
  MEGATRON_OTEL_SPAN_GROUPS=${MEGATRON_OTEL_SPAN_GROUPS:-all} \
  ./build/examples/telemetry_from_env --iterations 4 --microbatches 2 --layers 3 "$@" | tee "$log"

trace_file=$(sed -n 's/^traces: //p' "$log")
echo
echo "demo: the program's output is in $log"
echo "demo: its spans are in $trace_file (OTLP/JSON Lines, one export request per line)"
