"""lens at many ranks on one machine, each figure beside the same one at 4 ranks (bench/scale.sh runs this).

- A lens-only job (bench/scale_rank.cc: no LibTorch; the library's span, metric and log calls at the demo's pace of
  one iteration per 236 ms; pretrain_gpt's resource; the run id agreed through a real TCP rendezvous) of --ranks
  ranks (256 by default), every rank exporting OTLP/HTTP to one receiver (bench/otlp_counting_receiver.py, which
  decodes and counts): setup time per rank and time to agree on the run id; spans/s, bytes/s and requests/s arriving;
  then the receiver down for 10 s mid-run (every rank must keep training and lens's counts be exact: what the
  ranks counted as exported is what arrived, the rest counted as dropped); files (count, bytes per rank-hour) at
  `default`, `per_step` and `all`; `lens report` over the `all` run's files (wall time, peak memory, time per 1 M
  spans).
- The same job exporting to the real OpenTelemetry Collector (otelcol-lens: OTLP receiver, batch, file exporter):
  the Collector's CPU time per million spans, what sizes a fleet of them (docs/SCALE.md).
- pretrain_gpt at --gpt-ranks ranks (64 by default: pipeline 2 x data 32, the smallest model that still runs the real
  loop, a few dozen iterations): setup time per rank and time to agree on the run id, and `lens ctl` switching
  every rank at one iteration (`per_step --for 5`: exactly 5 step spans on every rank, from the same iteration).

Prints a table (Markdown) and writes every figure as JSON (--json FILE). With --check, fails (exit 1) when a promise
breaks: a rank that ended badly, a count that is not exact, a switch not at one iteration on all ranks.
"""

import argparse
import glob
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_ITERATION_MS = 236  # the demo's median step time (docs/PERFORMANCE.md), the pace of the lens-only ranks
GPT_FLAGS = ["--pipeline-model-parallel-size", "2", "--num-layers", "2", "--hidden-size", "16",
             "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "1", "--log-interval", "10",
             "--otel-enabled", "--testing-startup-times"]
STARTUP = re.compile(r"startup of rank (\d+): run id agreed at ([\d.]+) ms, telemetry set up at ([\d.]+) ms")


class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median_max(values):
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1)} if values else None


class Receiver:
    """The counting OTLP receiver as a process of its own (so that it can be down for a while)."""

    def __init__(self, python, port, counts_path):
        self.counts_path = counts_path
        self.process = subprocess.Popen([python, os.path.join(ROOT, "bench", "otlp_counting_receiver.py"), str(port),
                                         counts_path], stdout=subprocess.PIPE, text=True)
        if self.process.stdout.readline().strip() != "ready":
            raise Failed("the counting receiver did not start")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        with open(self.counts_path, encoding="utf-8") as f:
            return json.load(f)


def launch(argv, world, env, cwd):
    """`world` processes as torchrun starts them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*)."""
    base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks",
            "MEGATRON_OTEL_HANG_SIGNAL": "none", **env}
    return [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                             env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(world)]


def finish(ranks, what, timeout=900):
    outputs = [r.communicate(timeout=timeout)[0] for r in ranks]
    bad = [(i, r.returncode) for i, r in enumerate(ranks) if r.returncode != 0]
    if bad:
        raise Failed(f"{what}: {len(bad)} ranks ended badly, e.g. rank {bad[0][0]} ({bad[0][1]}):\n"
                     f"{outputs[bad[0][0]][-2000:]}")
    return outputs


def lens_only_otlp(o, ranks, workdir, receiver_down_s):
    """The lens-only job exporting to one receiver; with receiver_down_s, the receiver is stopped a third into the
    run and started again (same port) that much later."""
    port = free_port()
    receivers = [Receiver(o.venv_python, port, os.path.join(workdir, "counts0.json"))]
    env = {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "otlp", "MEGATRON_OTEL_SPAN_GROUPS": "all",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    run_s = o.otlp_iterations * DEMO_ITERATION_MS / 1000
    started = time.monotonic()
    procs = launch([o.scale_rank, str(o.otlp_iterations), str(DEMO_ITERATION_MS)], ranks, env, workdir)
    counts = []
    if receiver_down_s:
        time.sleep(run_s / 3)
        counts.append(receivers.pop().stop())
        time.sleep(receiver_down_s)
        receivers.append(Receiver(o.venv_python, port, os.path.join(workdir, "counts1.json")))
    outputs = finish(procs, f"the lens-only job of {ranks} ranks")
    wall_s = time.monotonic() - started
    counts.append(receivers.pop().stop())
    stats = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    arrived = {k: sum(c[k] for c in counts) for k in ("spans", "bytes", "requests", "points", "records",
                                                      "bad_requests")}
    produced, exported, dropped = (sum(s[k] for s in stats) for k in ("produced", "exported", "dropped"))
    exact = exported == arrived["spans"] and all(s["exported"] + s["dropped"] == s["produced"] for s in stats)
    if o.check and not exact:
        raise Failed(f"{ranks} ranks: the counts are not exact: the ranks exported {exported} spans (dropped "
                     f"{dropped} of {produced}), {arrived['spans']} arrived")
    return {"ranks": ranks, "iterations": o.otlp_iterations, "wall_s": round(wall_s, 1),
            "receiver_down_s": receiver_down_s,
            "agree_ms": median_max([s["agree_ms"] for s in stats]),
            "setup_ms": median_max([s["setup_ms"] for s in stats]),
            "spans_per_s": round(arrived["spans"] / run_s), "bytes_per_s": round(arrived["bytes"] / run_s),
            "requests_per_s": round(arrived["requests"] / run_s, 1), "arrived": arrived,
            "produced": produced, "exported": exported, "dropped": dropped, "exact": exact}


def collector_cpu(o, ranks, workdir):
    """The lens-only job exporting to the real OpenTelemetry Collector (tests/peers: OTLP receiver, batch, file
    exporter): the CPU time the Collector spent, per million spans it received (from /proc: user + system)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "collector"))
    import peers  # noqa: E402 (the Collector as the tests run it)
    peers.OTELCOL = os.path.join(o.peers_bin, "otelcol-lens")
    collector = peers.Collector(workdir, output=f"collector-{ranks}").start()
    env = {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "otlp", "MEGATRON_OTEL_SPAN_GROUPS": "all",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}"}

    def cpu_seconds():  # user + system, from /proc/<pid>/stat
        with open(f"/proc/{collector.process.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        time.sleep(1)
        at_start = cpu_seconds()  # its start-up is not the spans' cost
        outputs = finish(launch([o.scale_rank, str(o.file_iterations), str(DEMO_ITERATION_MS)], ranks, env, workdir),
                         f"the lens-only job of {ranks} ranks to the Collector")
        time.sleep(1)  # its batch processor's timeout is 200 ms: what arrived is written
        cpu_s = cpu_seconds() - at_start
    finally:
        collector.stop()
    exported = sum(json.loads(out.strip().splitlines()[-1])["exported"] for out in outputs)
    return {"ranks": ranks, "spans": exported, "cpu_s": round(cpu_s, 2),
            "cpu_s_per_million_spans": round(cpu_s / exported * 1e6, 2) if exported else None}


def lens_only_files(o, ranks, workdir, groups):
    telemetry = os.path.join(workdir, f"files-{groups}-{ranks}")
    env = {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": telemetry,
           "MEGATRON_OTEL_SPAN_GROUPS": groups}
    finish(launch([o.scale_rank, str(o.file_iterations), str(DEMO_ITERATION_MS)], ranks, env, workdir),
           f"the lens-only job of {ranks} ranks ({groups})")
    files = [p for p in glob.glob(os.path.join(telemetry, "*", "*")) if os.path.isfile(p)]
    total = sum(os.path.getsize(p) for p in files)
    hours = o.file_iterations * DEMO_ITERATION_MS / 3.6e6
    return {"ranks": ranks, "groups": groups, "files": len(files), "files_per_rank": len(files) / ranks,
            "bytes": total, "mb_per_rank_hour": round(total / ranks / hours / 1e6, 2), "dir": telemetry}


def report_over(o, run_dir):
    """`lens report --json` over a run's files: wall time and peak memory of the process (its own rusage)."""
    started = time.monotonic()
    process = subprocess.Popen([o.lens, "report", "--json", run_dir], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise Failed(f"lens report {run_dir} failed")
    spans = json.loads(out)["read"]["spans"]
    return {"wall_s": round(wall_s, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "spans": spans,
            "s_per_million_spans": round(wall_s / spans * 1e6, 2) if spans else None}


def steps_of(o, run_dir):
    """[(iteration, ranks that have its step span)] as `lens report --json` reads the run."""
    result = subprocess.run([o.lens, "report", "--json", run_dir], capture_output=True, text=True)
    return [(s["iteration"], s["ranks"]) for s in json.loads(result.stdout)["steps"]] if result.returncode == 0 else []


def gpt(o, ranks, workdir):
    """pretrain_gpt at `ranks` (pipeline 2 x data ranks/2): startup times, and lens ctl's switch on every rank."""
    telemetry = os.path.join(workdir, f"gpt-{ranks}")
    flags = [*GPT_FLAGS, "--global-batch-size", str(ranks), "--train-iters", str(o.gpt_iterations)]
    env = {"MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": telemetry, "MEGATRON_OTEL_CONTROL": "1",
           "MEGATRON_OTEL_SPAN_GROUPS": "default"}
    started = time.monotonic()
    procs = launch([o.trainer, *flags], ranks, env, workdir)
    run_dir, asked_after, ctl_s = None, None, None
    try:
        deadline = time.monotonic() + 600
        while asked_after is None and time.monotonic() < deadline:
            found = glob.glob(os.path.join(telemetry, "*", "control.json"))
            if found:
                run_dir = os.path.dirname(found[0])
                status = subprocess.run([o.lens, "ctl", run_dir, "status"], capture_output=True, text=True)
                if status.returncode == 0 and json.loads(status.stdout)["iteration"] >= 3:
                    asked = time.monotonic()
                    result = subprocess.run([o.lens, "ctl", run_dir, "span-groups", "per_step", "--for", "5"],
                                            capture_output=True, text=True)
                    ctl_s = time.monotonic() - asked
                    if result.returncode != 0:
                        raise Failed(f"lens ctl: {result.stderr}")
                    asked_after = json.loads(result.stdout)["from_iteration_after"]
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.2)
        outputs = finish(procs, f"pretrain_gpt on {ranks} ranks")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    wall_s = time.monotonic() - started
    startup = [STARTUP.search(out) for out in outputs]
    # Every rank's step spans (default has none): exactly 5 iterations, each on every rank, from one iteration on.
    steps = steps_of(o, run_dir) if run_dir else []
    first = steps[0][0] if steps else None
    one_iteration = (asked_after is not None and first <= asked_after + 2
                     and steps == [(first + k, ranks) for k in range(5)])
    if o.check and not one_iteration:
        raise Failed(f"pretrain_gpt on {ranks} ranks: lens ctl's switch was not at one iteration on every rank: "
                     f"asked after {asked_after}, step spans {steps}")
    return {"ranks": ranks, "iterations": o.gpt_iterations, "wall_s": round(wall_s, 1),
            "agree_ms": median_max([float(m.group(2)) for m in startup if m]),
            "setup_ms": median_max([float(m.group(3)) for m in startup if m]),
            "ctl_command_s": round(ctl_s, 2) if ctl_s is not None else None,
            "switch": {"asked_after": asked_after, "first": first,
                       "ranks_switched": min((r for _, r in steps), default=0), "one_iteration": one_iteration}}


def table(figures):
    rows = ["| figure | " + " | ".join(f"{r} ranks" for r in figures["sizes"]) + " |",
            "| --- |" + " --- |" * len(figures["sizes"])]

    def row(name, values):
        rows.append(f"| {name} | " + " | ".join(str(v) for v in values) + " |")

    lo = figures["lens_only"]
    row("lens-only: run id agreed, ms after start (median / max)",
        [f"{x['agree_ms']['median']} / {x['agree_ms']['max']}" for x in lo])
    row("lens-only: telemetry set up, ms after start (median / max)",
        [f"{x['setup_ms']['median']} / {x['setup_ms']['max']}" for x in lo])
    row("at the receiver: spans/s", [x["spans_per_s"] for x in lo])
    row("at the receiver: bytes/s", [x["bytes_per_s"] for x in lo])
    row("at the receiver: requests/s", [x["requests_per_s"] for x in lo])
    down = figures["receiver_down"]
    row("receiver down 10 s: spans produced / exported / dropped, exact",
        [f"{x['produced']} / {x['exported']} / {x['dropped']}, {x['exact']}" for x in down])
    for groups in ("default", "per_step", "all"):
        files = [x for x in figures["files"] if x["groups"] == groups]
        row(f"files at `{groups}`: per rank, MB per rank-hour",
            [f"{x['files_per_rank']:g}, {x['mb_per_rank_hour']}" for x in files])
    row("lens report over the `all` files: wall s, peak MB, s per 1 M spans",
        [f"{x['wall_s']}, {x['peak_rss_mb']}, {x['s_per_million_spans']}" for x in figures["report"]])
    row("the real Collector's CPU (user + system) per 1 M spans received, s",
        [x["cpu_s_per_million_spans"] for x in figures["collector"]])
    g = figures["gpt"]
    rows.append("")
    rows.append("| pretrain_gpt | " + " | ".join(f"{x['ranks']} ranks" for x in g) + " |")
    rows.append("| --- |" + " --- |" * len(g))
    row("run id agreed, ms after main (median / max)",
        [f"{x['agree_ms']['median']} / {x['agree_ms']['max']}" for x in g])
    row("telemetry set up, ms after main (median / max)",
        [f"{x['setup_ms']['median']} / {x['setup_ms']['max']}" for x in g])
    row("lens ctl: command s; switched ranks, at one iteration",
        [f"{x['ctl_command_s']}; {x['switch']['ranks_switched']}, {x['switch']['one_iteration']}" for x in g])
    row("wall s (iterations)", [f"{x['wall_s']} ({x['iterations']})" for x in g])
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=256, help="ranks of the lens-only job (beside 4)")
    parser.add_argument("--gpt-ranks", type=int, default=64, help="ranks of pretrain_gpt (beside 4; even)")
    parser.add_argument("--otlp-iterations", type=int, default=100, help="of the lens-only OTLP runs")
    parser.add_argument("--file-iterations", type=int, default=50, help="of the lens-only file runs")
    parser.add_argument("--gpt-iterations", type=int, default=30)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--venv-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    parser.add_argument("--peers-bin", default=os.path.join(ROOT, "tests", "peers", "bin"), help="otelcol-lens")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a promise breaks")
    parser.add_argument("--no-baseline", action="store_true",
                        help="run --ranks and --gpt-ranks only, not beside 4 (the promises, not the comparison)")
    o = parser.parse_args()
    o.scale_rank = os.path.join(o.build, "bench", "scale_rank")
    o.trainer = os.path.join(o.build, "trainer", "pretrain_gpt")
    o.lens = os.path.join(o.build, "tools", "lens")
    sizes = [o.ranks] if o.no_baseline else [4, o.ranks]
    gpt_sizes = [o.gpt_ranks] if o.no_baseline else [4, o.gpt_ranks]
    figures = {"sizes": sizes, "machine": f"{os.cpu_count()} cores", "lens_only": [], "receiver_down": [],
               "files": [], "report": [], "collector": [], "gpt": []}
    with tempfile.TemporaryDirectory(prefix="lens-scale-") as workdir:
        try:
            for ranks in sizes:
                print(f"scale: lens-only, {ranks} ranks", file=sys.stderr, flush=True)
                figures["lens_only"].append(lens_only_otlp(o, ranks, workdir, 0))
                figures["receiver_down"].append(lens_only_otlp(o, ranks, workdir, 10))
                for groups in ("default", "per_step", "all"):
                    figures["files"].append(lens_only_files(o, ranks, workdir, groups))
                run_dir = glob.glob(os.path.join(figures["files"][-1]["dir"], "*"))[0]
                figures["report"].append(report_over(o, run_dir))
                figures["collector"].append(collector_cpu(o, ranks, workdir))
            for ranks in gpt_sizes:
                print(f"scale: pretrain_gpt, {ranks} ranks", file=sys.stderr, flush=True)
                figures["gpt"].append(gpt(o, ranks, workdir))
        except Failed as e:
            print(f"scale: {e}", file=sys.stderr)
            return 1
    for f in figures["files"]:
        f.pop("dir")
    print(table(figures))
    if o.json:
        with open(o.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
