#!/usr/bin/env bash
# A local telemetry stack in one command, from what ./scripts/setup-deps.sh built and installed: the OpenTelemetry
# Collector with deploy/otelcol-backend.yaml (traces, metrics and logs to files `lens report` reads, traces on to
# Jaeger), Jaeger (in memory; its query API), and Prometheus with deploy/prometheus/prometheus.yml and lens.rules.yml,
# scraping the ranks that serve metrics (OTEL_METRICS_EXPORTER=prometheus) through the target files lens writes.
# Everything listens on loopback only, and runs until `down`.
#
#   ./scripts/stack.sh up      # starts the three, waits until each answers, prints where each is and how to point
#                              # a job at them
#   ./scripts/stack.sh down    # stops them (their files stay in the stack's directory)
#
# The stack's directory (configurations, logs, pids, the Collector's files, the ranks' Prometheus targets):
# LENS_STACK_DIR, default build/stack. Ports (loopback): LENS_STACK_OTLP_GRPC_PORT (4317), LENS_STACK_OTLP_HTTP_PORT
# (4318), LENS_STACK_JAEGER_PORT (16686, its query API), LENS_STACK_PROMETHEUS_PORT (9090); Jaeger's own OTLP
# receiver, which only the Collector sends to, takes LENS_STACK_JAEGER_OTLP_PORT (14317). A port in use is an error
# naming it. Scrapes and rule evaluations every 5 s (deploy/prometheus/prometheus.yml's 15 s suits a cluster; a
# local stack is for looking now). Grafana and Jaeger's UI: deploy/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${LENS_STACK_DIR:-$root/build/stack}
grpc_port=${LENS_STACK_OTLP_GRPC_PORT:-4317}
http_port=${LENS_STACK_OTLP_HTTP_PORT:-4318}
jaeger_port=${LENS_STACK_JAEGER_PORT:-16686}
jaeger_otlp_port=${LENS_STACK_JAEGER_OTLP_PORT:-14317}
prometheus_port=${LENS_STACK_PROMETHEUS_PORT:-9090}
otelcol=$root/tests/peers/bin/otelcol-lens
jaeger=$root/tests/peers/bin/jaeger
names=(otelcol jaeger prometheus)

die() {
  echo "stack: $*" >&2
  exit 1
}

port_in_use() {  # 0 when something listens on 127.0.0.1:$1
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

running() {  # 0 when the stack's process $1 runs
  [[ -f $dir/$1.pid ]] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null
}

# Starts $1 (its log in the stack's directory) and waits up to 60 s for port $2 to answer.
start() {
  local name=$1 port=$2
  shift 2
  nohup "$@" >"$dir/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/$name.pid"
  for _ in $(seq 600); do
    port_in_use "$port" && return 0
    kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$dir/$name.log" >&2 || true
  down
  die "$name did not start (its log: $dir/$name.log)"
}

up() {
  for name in "${names[@]}"; do
    if running "$name"; then die "$name already runs (pid $(cat "$dir/$name.pid")); ./scripts/stack.sh down first"; fi
  done
  for program in "$otelcol" "$jaeger" /usr/bin/prometheus; do
    [[ -x $program ]] || die "$program is not there: run ./scripts/setup-deps.sh"
  done
  for port in "$grpc_port" "$http_port" "$jaeger_port" "$jaeger_otlp_port" "$prometheus_port"; do
    if port_in_use "$port"; then die "port $port on 127.0.0.1 is in use; choose another (the LENS_STACK_*_PORT variables)"; fi
  done
  mkdir -p "$dir/files" "$dir/telemetry/prometheus" "$dir/prometheus-data"
  # The Collector: deploy/otelcol-backend.yaml with its ${env:...} values and its receivers on loopback.
  sed -e "s|\${env:LENS_FILE_DIR}|$dir/files|g" -e "s|\${env:LENS_JAEGER_OTLP}|127.0.0.1:$jaeger_otlp_port|g" \
    -e "s|0.0.0.0:4317|127.0.0.1:$grpc_port|" -e "s|0.0.0.0:4318|127.0.0.1:$http_port|" \
    deploy/otelcol-backend.yaml >"$dir/otelcol.yaml"
  grep -q '\${env:' "$dir/otelcol.yaml" && die "deploy/otelcol-backend.yaml has a value this script does not fill in"
  # Jaeger: OTLP in (from the Collector), traces in memory, the query API.
  cat >"$dir/jaeger.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}}
extensions:
  jaeger_storage: {backends: {memstore: {memory: {max_traces: 100000}}}}
  jaeger_query: {storage: {traces: memstore}, http: {endpoint: "127.0.0.1:$jaeger_port"}, grpc: {endpoint: "127.0.0.1:0"}}
receivers:
  otlp: {protocols: {grpc: {endpoint: "127.0.0.1:$jaeger_otlp_port"}, http: {endpoint: "127.0.0.1:0"}}}
processors:
  batch: {timeout: 200ms}
exporters:
  jaeger_storage_exporter: {trace_storage: memstore}
EOF
  # Prometheus: deploy/prometheus/prometheus.yml, its rules beside it, the ranks' targets under this stack's
  # telemetry directory, every 5 s.
  cp deploy/prometheus/lens.rules.yml "$dir/lens.rules.yml"
  sed -e "s|/shared/telemetry/prometheus/\*.json|$dir/telemetry/prometheus/*.json|" \
    -e "s|scrape_interval: 15s|scrape_interval: 5s|" -e "s|evaluation_interval: 15s|evaluation_interval: 5s|" \
    -e "s|refresh_interval: 30s|refresh_interval: 5s|" deploy/prometheus/prometheus.yml >"$dir/prometheus.yml"
  grep -q "$dir/telemetry/prometheus" "$dir/prometheus.yml" ||
    die "deploy/prometheus/prometheus.yml's target path changed; this script fills in /shared/telemetry/prometheus"
  # Their own telemetry off: by default they would send it to 127.0.0.1:4317, the Collector's port.
  OTEL_SDK_DISABLED=true OTEL_TRACES_EXPORTER=none start jaeger "$jaeger_port" "$jaeger" --config "$dir/jaeger.yaml"
  start otelcol "$grpc_port" "$otelcol" --config "$dir/otelcol.yaml"
  start prometheus "$prometheus_port" /usr/bin/prometheus --config.file="$dir/prometheus.yml" \
    --storage.tsdb.path="$dir/prometheus-data" --web.listen-address="127.0.0.1:$prometheus_port" --log.level=warn
  # Its port opens before its storage: until then a query is a 503.
  for _ in $(seq 300); do
    /usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
      "http://127.0.0.1:$prometheus_port/-/ready" 2>/dev/null && break
    sleep 0.1
  done
  cat <<EOF
stack: up (./scripts/stack.sh down stops it)
  OpenTelemetry Collector  OTLP gRPC 127.0.0.1:$grpc_port, HTTP 127.0.0.1:$http_port; files for lens report: $dir/files/<run id>
  Jaeger                   query API http://127.0.0.1:$jaeger_port/api/traces?service=<service>
  Prometheus               http://127.0.0.1:$prometheus_port (lens's rules loaded; alerts: /api/v1/alerts)
Point a job at it:
  export MEGATRON_OTEL_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$grpc_port OTEL_EXPORTER_OTLP_PROTOCOL=grpc
  export OTEL_METRICS_EXPORTER=prometheus OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1 MEGATRON_OTEL_FILE_DIR=$dir/telemetry
EOF
}

down() {
  local stopped=0
  for name in "${names[@]}"; do
    if running "$name"; then
      local pid
      pid=$(cat "$dir/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      stopped=$((stopped + 1))
    fi
    rm -f "$dir/$name.pid"
  done
  echo "stack: down ($stopped stopped; files stay in $dir)"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) die "usage: ./scripts/stack.sh up|down" ;;
esac
