#!/usr/bin/env bash
# How fast `lens report` reads a run, and how much memory it holds: a generated run of N spans (4 ranks, the
# demo's span names and density: a step span in every 30 spans of a rank; batches of 512 spans a line as lens writes
# them), read once by `cat` (the same bytes
# with no parsing: the baseline, and it warms the page cache) and then by `lens report --json`, three times, the median
# reported. With a second lens program (another build, e.g. of the commit before a change), both read the same
# files in turn, three times each, so the two are compared in one run. Figures and machine: docs/PERFORMANCE.md.
#
# Each lens program that knows --threads reads at 1 thread and at 2 (files read in parallel); the figures
# say spans per second of one core (spans / CPU seconds) and of the wall clock, and the peak memory.
#
#   ./bench/lens_report_benchmark.sh [spans=10000000] [ranks=4] [lens=build/tools/lens] [other_lens]
set -euo pipefail
spans=${1:-10000000}
ranks=${2:-4}
lens=${3:-build/tools/lens}
other=${4:-}
spans=$((spans / ranks * ranks))  # the same number in every file
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 - "$work/run" "$spans" "$ranks" <<'PY'
import json, os, sys
directory, total, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(directory)
names = ["megatron.layer.self_attention", "megatron.layer.mlp", "megatron.layer.forward", "megatron.microbatch.forward",
         "megatron.p2p.send_forward", "megatron.p2p.recv_backward", "megatron.microbatch.backward",
         "megatron.p2p.send_backward", "megatron.forward_backward", "megatron.grad_sync.finish",
         "megatron.optimizer_step", "megatron.train_step"]
def attr(k, v):
    return {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
per_rank = total // ranks
for rank in range(ranks):
    resource = {"attributes": [attr("service.name", "megatron-lm"), attr("nemo.run.id", "bench"), attr("dl.rank", rank),
                               attr("dl.world_size", ranks), attr("process.pid", 1000 + rank)]}
    with open(os.path.join(directory, f"rank{rank}.traces.jsonl"), "w") as f:
        written, t = 0, 1_700_000_000_000_000_000
        while written < per_rank:
            batch = []
            for _ in range(min(512, per_rank - written)):
                i = written + len(batch)
                # One step span a rank in every 30 spans, the demo's density (11,942 spans, 400 step spans).
                name = "megatron.train_step" if i % 30 == 29 else names[i % (len(names) - 1)]
                span = {"traceId": f"{i:032x}", "spanId": f"{i + 1:016x}", "parentSpanId": f"{i + 2:016x}", "flags": 259,
                        "name": name, "kind": 1, "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 1000 + i % 977),
                        "status": {}}
                if name == "megatron.train_step":
                    span["attributes"] = [attr("megatron.iteration", i // 30 + 1), attr("is_goodput_span", "true")]
                batch.append(span)
                t += 2000
            written += len(batch)
            f.write(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "lens", "version": "0.1.0"}, "spans": batch}]}]}, separators=(",", ":")) + "\n")
PY
bytes=$(cat "$work"/run/*.jsonl | wc -c)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)"
echo "run: $spans spans in $ranks files, $((bytes / 1000000)) MB"
cat_s=$( { /usr/bin/time -f '%e' cat "$work"/run/*.jsonl >/dev/null; } 2>&1 )
cat_s=$( { /usr/bin/time -f '%e' cat "$work"/run/*.jsonl >/dev/null; } 2>&1 )  # warm cache
# One configuration a line: the program, then its reading threads ("-" for a program without --threads).
configs=()
for program in "$lens" ${other:+"$other"}; do
  if "$program" report --help | grep -q -- --threads; then
    configs+=("$program 1" "$program 2")
  else
    configs+=("$program -")
  fi
done
for round in 1 2 3; do
  for i in "${!configs[@]}"; do
    read -r program threads <<<"${configs[$i]}"
    args=(report "$work/run" --json)
    [[ $threads != - ]] && args+=(--threads "$threads")
    /usr/bin/time -f '%e %U %S %M' -a -o "$work/times.$i" "$program" "${args[@]}" >"$work/report.$i.json"
  done
done
/usr/bin/python3 - "$work" "$spans" "$cat_s" "$bytes" "${configs[@]}" <<'PY'
import json, os, statistics, sys
work, spans, cat_s, size, *configs = sys.argv[1:]
reports = [json.load(open(os.path.join(work, f"report.{i}.json"))) for i in range(len(configs))]
for r in reports:
    assert r["read"]["spans"] == int(spans), f"read {r['read']['spans']} spans of {spans}"
    assert r == reports[0], "the figures differ between programs or thread counts"
spans, cat_s, size = int(spans), float(cat_s), int(size)
print(f"cat (the same bytes, no parsing): {cat_s:.2f} s ({size / 1e6 / max(cat_s, 0.01):.0f} MB/s)")
for i, config in enumerate(configs):
    program, threads = config.rsplit(" ", 1)
    runs = [line.split() for line in open(os.path.join(work, f"times.{i}"))]
    wall, user, system, rss = (statistics.median(float(r[k]) for r in runs) for k in range(4))
    cpu = user + system
    print(f"lens report --json ({program}, threads {threads}, median of {len(runs)}): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU: {spans / max(cpu, 0.01) / 1e6:.2f} M spans/s of one core, "
          f"{spans / max(wall, 0.01) / 1e6:.2f} M spans/s ({size / 1e6 / max(wall, 0.01):.0f} MB/s), "
          f"peak memory {rss / 1024:.1f} MiB (a step table of {len(reports[0]['steps'])} iterations)")
PY
