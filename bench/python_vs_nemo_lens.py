#!/usr/bin/python3
"""The Python hot paths on lens beside the real NeMo Lens, in the same CPython 3.13, one run.

    python3 bench/python_vs_nemo_lens.py [--rounds 15] [--quick]
        (LENS_WHEELHOUSE=build/wheelhouse: lens's wheels; .wheelhouse: NeMo Lens 0.1.0 and the OpenTelemetry SDK,
         both from scripts/setup-deps.sh)

Each library runs in a fresh venv of its own on CPython 3.13 with the OpenTelemetry SDK; the same measuring code
(this file, as `--child`) imports only `nemo.lens` and `opentelemetry`. NeMo Lens exports through its SDK
providers (a BatchSpanProcessor) to an SDK exporter that counts and keeps nothing; lens through its own pipeline to
its file exporter (what it encodes is written: its figure includes the encoding NeMo Lens's counting exporter
skips). A round runs each path a batch of times (fewer than either library's queue holds), then flushes; the figures
are medians over rounds:
  - ns a call on the calling thread (perf_counter), and process CPU a call (process_time, the flush included: the
    background thread's work on the spans is counted), with the drop ratio beside every path that exports;
  - each path's baseline in the same round: `contextlib.nullcontext`, `functools.partial`, a frozenset test.
Paths: a kept managed_span with 2 attributes, a kept trace_fn call, the OpenTelemetry API's start_as_current_span,
get_current_span().set_attribute, a context.attach/detach pair, and with the group off: managed_span, a trace_fn
call, is_span_group_enabled. Then, each in a process of its own: Megatron-LM's calls for one training iteration
under its `default` and `per_step` presets (ns an iteration); a burst of kept spans into an SDK exporter given to
setup_telemetry (NeMo Lens's form): its throughput and drop ratio; and what OpenTelemetry's API costs with nothing
behind it, the floor under both libraries' get_current_span and attach/detach. Figures, command and machine:
docs/PERFORMANCE.md. `--quick` (3 rounds, a burst of 5,000) is a ctest: every path runs, no timing is asserted."""

import argparse
import contextlib
import functools
import glob
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DOWNLOADS = os.path.join(ROOT, ".wheelhouse")

KEPT_GROUP, OFF_GROUP = "step", "layer"  # the `default` preset has neither: both set below
# Off too, but one of the loop's groups: lens keeps its spans as positions for hang snapshots (on by default).
POSITION_GROUP = "forward_backward"
BATCH = 1000  # calls a round, under NeMo Lens's BatchSpanProcessor queue (2048): no drop from the queue's size


# ---- the measuring child: runs inside one library's venv -------------------------------------------------------

def counting_exporter():
    """An OpenTelemetry SDK span exporter that counts what it is given and keeps nothing."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Counting(SpanExporter):
        def __init__(self):
            self.spans = 0

        def export(self, spans):
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    return Counting()


def child_environment():
    # Under the working directory: the parent runs every child in a temporary directory it removes.
    directory = tempfile.mkdtemp(prefix="files-", dir=os.getcwd())
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS=KEPT_GROUP, NEMO_LENS_RUN_ID="bench",
                      NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=directory, NEMO_LENS_METRICS_ENABLED="0")
    return directory


def child_paths(library, rounds):
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    directory = child_environment()
    from nemo.lens import NemoLensConfig, setup_telemetry
    from nemo.lens.helpers import managed_span, trace_fn
    from nemo.lens.state import is_span_group_enabled

    counting = counting_exporter()
    exported = Exported(library, directory, counting)
    handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1,
                             **({"span_exporter": counting} if library == "nemo_lens" else {}))
    tracer = trace.get_tracer("bench")

    def work():
        return None

    kept_fn = trace_fn(KEPT_GROUP, "bench.traced")(work)
    off_fn = trace_fn(OFF_GROUP, "bench.traced")(work)
    position_fn = trace_fn(POSITION_GROUP, "bench.traced")(work)
    partial_fn = functools.partial(work)
    groups = frozenset({KEPT_GROUP})
    nullcontext = contextlib.nullcontext

    def managed_spans(group):
        def body():
            for _ in range(BATCH):
                with managed_span(group, "bench.span", a=1, b="two"):
                    pass
        return body

    def calls(function):
        def body():
            for _ in range(BATCH):
                function()
        return body

    def otel_span():
        for _ in range(BATCH):
            with tracer.start_as_current_span("bench.otel"):
                pass

    def baseline_nullcontext():
        for _ in range(BATCH):
            with nullcontext():
                pass

    def baseline_frozenset():
        for _ in range(BATCH):
            KEPT_GROUP in groups  # noqa: B015: the baseline is the test itself

    def group_check():
        for _ in range(BATCH):
            is_span_group_enabled(OFF_GROUP)

    def set_attribute():
        with tracer.start_as_current_span("bench.holder"):
            for i in range(BATCH):
                trace.get_current_span().set_attribute("k", i)

    def attach_detach():
        with tracer.start_as_current_span("bench.holder") as span:
            ctx = trace.set_span_in_context(span)
            for _ in range(BATCH):
                otel_context.detach(otel_context.attach(ctx))

    # name: (body, baseline, spans it exports a round)
    paths = {
        "nullcontext": (baseline_nullcontext, None, 0),
        "functools.partial call": (calls(partial_fn), None, 0),
        "frozenset membership": (baseline_frozenset, None, 0),
        "kept managed_span, 2 attributes": (managed_spans(KEPT_GROUP), "nullcontext", BATCH),
        "kept trace_fn call": (calls(kept_fn), "functools.partial call", BATCH),
        "OTel API start_as_current_span": (otel_span, "nullcontext", BATCH),
        "get_current_span().set_attribute": (set_attribute, None, 1),
        "context.attach + detach": (attach_detach, None, 1),
        "off-group managed_span": (managed_spans(OFF_GROUP), "nullcontext", 0),
        "off-group trace_fn call": (calls(off_fn), "functools.partial call", 0),
        "off-group managed_span, lens keeps a position": (managed_spans(POSITION_GROUP), "nullcontext", 0),
        "off-group trace_fn call, lens keeps a position": (calls(position_fn), "functools.partial call", 0),
        "is_span_group_enabled (off)": (group_check, "frozenset membership", 0),
    }
    samples = {name: {"ns": [], "cpu_ns": [], "ratio": []} for name in paths}
    produced = {name: 0 for name in paths}
    for _ in range(rounds):
        this_round = {}
        for name, (body, baseline, spans) in paths.items():
            before = exported.count()
            wall, cpu = time.perf_counter_ns(), time.process_time_ns()
            body()
            wall = time.perf_counter_ns() - wall
            if spans:
                trace.get_tracer_provider().force_flush()  # both libraries' global provider once set up
            cpu = time.process_time_ns() - cpu
            this_round[name] = wall / BATCH
            samples[name]["ns"].append(wall / BATCH)
            samples[name]["cpu_ns"].append(cpu / BATCH)
            if baseline:
                samples[name]["ratio"].append(this_round[name] / this_round[baseline])
            if spans:
                produced[name] += spans
                samples[name].setdefault("exported", 0)
                samples[name]["exported"] += exported.count() - before
    result = {}
    for name, s in samples.items():
        entry = {"ns": statistics.median(s["ns"]), "cpu_ns": statistics.median(s["cpu_ns"])}
        if s["ratio"]:
            entry["ratio"] = statistics.median(s["ratio"])
        if produced[name]:
            entry["drop_ratio"] = 1 - min(s["exported"], produced[name]) / produced[name]
        result[name] = entry
    handle.shutdown()
    result["python"] = platform.python_version()
    return result


class Exported:
    """Spans exported so far: the counting exporter's (NeMo Lens), or the lines of lens's span files."""

    def __init__(self, library, directory, counting):
        self.library, self.directory, self.counting = library, directory, counting

    def count(self):
        if self.library == "nemo_lens":
            return self.counting.spans
        total = 0
        for path in glob.glob(os.path.join(self.directory, "*", "rank0.traces.jsonl")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    document = json.loads(line)
                    total += sum(len(ss["spans"]) for rs in document["resourceSpans"] for ss in rs["scopeSpans"])
        return total


def child_burst(spans, rounds):
    """A burst of kept managed_spans into an SDK exporter given to setup_telemetry: spans a second and drop ratio,
    the training thread holding the GIL while the exporter's thread needs it. Then the export path alone: rounds of
    BATCH spans (fewer than either queue holds) made first, then one flush timed: spans a second, none dropped."""
    child_environment()
    from nemo.lens import NemoLensConfig, setup_telemetry
    from nemo.lens.helpers import managed_span
    from opentelemetry import trace
    counting = counting_exporter()
    handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1, span_exporter=counting)
    start = time.perf_counter()
    for _ in range(spans):
        with managed_span(KEPT_GROUP, "bench.burst", a=1):
            pass
    trace.get_tracer_provider().force_flush()
    seconds = time.perf_counter() - start
    exported = counting.spans
    alone = []
    for _ in range(rounds):
        for _ in range(BATCH):
            with managed_span(KEPT_GROUP, "bench.queued", a=1):
                pass
        before, start = counting.spans, time.perf_counter()
        trace.get_tracer_provider().force_flush()
        alone.append((counting.spans - before) / (time.perf_counter() - start))
    queued_drop = 1 - (counting.spans - exported) / (rounds * BATCH)
    handle.shutdown()
    return {"spans": spans, "exported": exported, "drop_ratio": 1 - exported / spans,
            "exported_per_second": exported / seconds, "alone_per_second": statistics.median(alone),
            "alone_drop_ratio": queued_drop}


def child_otel_api_floor(rounds):
    """What OpenTelemetry's Python API costs with nothing behind it (no SDK, its own contextvars runtime context, a
    no-op span current): the floor under both libraries' get_current_span().set_attribute and attach + detach."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    span = trace.NonRecordingSpan(trace.SpanContext(1, 2, False))
    ctx = trace.set_span_in_context(span)
    token = otel_context.attach(ctx)

    def set_attribute():
        for i in range(BATCH):
            trace.get_current_span().set_attribute("k", i)

    def attach_detach():
        for _ in range(BATCH):
            otel_context.detach(otel_context.attach(ctx))

    result = {}
    for name, body in (("get_current_span().set_attribute", set_attribute), ("context.attach + detach", attach_detach)):
        samples = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            body()
            samples.append((time.perf_counter_ns() - start) / BATCH)
        result[name] = statistics.median(samples)
    otel_context.detach(token)
    return result


MEGATRON_ITERATIONS = 200  # a round of Megatron's per-step pattern
MEGATRON_PRESETS = ("default", "per_step")


def child_megatron(library, preset, rounds):
    """One training iteration's calls as Megatron-LM makes them (tests/otel_python/megatron_shapes.py: the step
    span, its trace_fn forward_backward with the communication check inside, the loss on the step span, the three
    training metrics), under Megatron's span-group class and `preset`: ns an iteration, medians over rounds."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "otel_python"))
    from megatron_shapes import _megatron_span_group
    child_environment()
    os.environ.update(NEMO_LENS_SPAN_GROUPS=preset, NEMO_LENS_METRICS_ENABLED="1",
                      OTEL_METRIC_EXPORT_INTERVAL="3600000")  # real instruments, no export inside the rounds
    from nemo.lens import NemoLensConfig, setup_telemetry
    from nemo.lens.helpers import managed_span, safe_set_span_attributes, trace_fn
    from nemo.lens.state import is_span_group_enabled
    config = NemoLensConfig.from_env(span_group_cls=_megatron_span_group())
    sdk = {}
    if library == "nemo_lens":  # its SDK providers: the counting span exporter, a reader its collections go to
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        sdk = {"span_exporter": counting_exporter(), "metric_reader": InMemoryMetricReader()}
    handle = setup_telemetry(config, rank=0, world_size=1, **sdk)
    meter = handle.meter
    step_ms = meter.create_histogram(name="megatron.training.step_duration_ms", unit="ms")
    loss_gauge = meter.create_gauge(name="megatron.training.loss")
    skipped = meter.create_counter(name="megatron.training.skipped_iters")

    @trace_fn("forward_backward", "megatron.train.iteration.forward_backward")
    def forward_backward(iteration):
        if is_span_group_enabled("communication"):
            pass  # schedules.py: the linked recv span where a carrier exists (none on one rank)
        return 2.5 - 0.001 * iteration

    def iteration(i):
        if is_span_group_enabled("job") and i % 1000 == 0:
            pass  # the interval block's re-rooting, every save_interval
        with managed_span("step", "megatron.train.iteration", **{"megatron.iteration": i}) as span:
            loss = forward_backward(i)
            if span is not None:  # a group that is off yields None (NeMo Lens's safe_set_span_attributes needs a span)
                safe_set_span_attributes(span, {"megatron.loss": loss})
        step_ms.record(100.0 + i % 7)
        loss_gauge.set(loss)
        skipped.add(0)

    from opentelemetry import trace
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for i in range(MEGATRON_ITERATIONS):
            iteration(i)
        samples.append((time.perf_counter_ns() - start) / MEGATRON_ITERATIONS)
        trace.get_tracer_provider().force_flush()
    handle.shutdown()
    return {"ns_per_iteration": statistics.median(samples)}


# ---- the driver ------------------------------------------------------------------------------------------------

def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"{command}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result


def python313():
    return run(["bash", "-c", f"source {ROOT}/scripts/python_of.sh && python_of 3.13"]).stdout.strip()


def venv(path, *packages):
    run([python313(), "-m", "venv", path])
    run([os.path.join(path, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-index",
         "--find-links", DOWNLOADS, *packages])
    return os.path.join(path, "bin", "python")


def lens_wheel():
    wheels = glob.glob(os.path.join(os.environ.get("LENS_WHEELHOUSE", "build/wheelhouse"), "lens-*-cp313-*.whl"))
    if not wheels:
        raise SystemExit("no lens wheel for CPython 3.13: build the wheels (LENS_WHEELHOUSE)")
    return wheels[0]


def table(results):
    lens, nemo = results["lens"], results["nemo_lens"]
    lines = ["| path | lens ns | NeMo Lens ns | NeMo Lens / lens | lens CPU ns | NeMo Lens CPU ns | lens x baseline "
             "| NeMo Lens x baseline | drop lens / NeMo Lens |", "|---" * 9 + "|"]
    for name, mine in lens.items():
        if name in ("python", "sdk exporter burst") or name.startswith("megatron "):
            continue
        theirs = nemo[name]

        def ratio(entry):
            return f"{entry['ratio']:.2f}x" if "ratio" in entry else ""

        def drop(entry):
            return f"{entry['drop_ratio']:.3f}" if "drop_ratio" in entry else ""

        drops = f"{drop(mine)} / {drop(theirs)}" if "drop_ratio" in mine else ""
        lines.append(f"| {name} | {mine['ns']:.0f} | {theirs['ns']:.0f} | {theirs['ns'] / mine['ns']:.1f}x "
                     f"| {mine['cpu_ns']:.0f} | {theirs['cpu_ns']:.0f} | {ratio(mine)} | {ratio(theirs)} | {drops} |")
    for preset in MEGATRON_PRESETS:
        mine, theirs = (results[library][f"megatron {preset}"]["ns_per_iteration"] for library in ("lens", "nemo_lens"))
        lines.append(f"| Megatron's calls for one iteration, `{preset}` | {mine:.0f} | {theirs:.0f} | "
                     f"{theirs / mine:.1f}x | | | | | |")
    floor = results["otel_api_floor"]
    lines.append("\nOpenTelemetry's API alone (no SDK, its contextvars runtime context, a no-op span current), "
                 "same run: " + ", ".join(f"{name} {ns:.0f} ns" for name, ns in floor.items()))
    for library in ("lens", "nemo_lens"):
        b = results[library]["sdk exporter burst"]
        lines.append(f"\nSDK exporter ({library}): a burst of {b['spans']} spans, {b['exported_per_second']:,.0f} "
                     f"exported a second, drop ratio {b['drop_ratio']:.3f}; the export path alone "
                     f"{b['alone_per_second']:,.0f} a second, drop ratio {b['alone_drop_ratio']:.3f}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 rounds, a small burst: a smoke run (CI)")
    parser.add_argument("--child", choices=("lens", "nemo_lens"), help=argparse.SUPPRESS)
    parser.add_argument("--burst", type=int, default=250_000, help=argparse.SUPPRESS)
    parser.add_argument("--burst-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--megatron", choices=MEGATRON_PRESETS, help=argparse.SUPPRESS)
    parser.add_argument("--otel-api-floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds, burst = (3, 5_000) if args.quick else (args.rounds, args.burst)
    if args.child:  # one library's figures as a JSON line (a setup a process: each library's burst in its own)
        if args.megatron:
            print(json.dumps(child_megatron(args.child, args.megatron, rounds)))
        elif args.otel_api_floor:
            print(json.dumps(child_otel_api_floor(rounds)))
        else:
            print(json.dumps(child_burst(burst, rounds) if args.burst_only else child_paths(args.child, rounds)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-vs-nemo-lens-") as tmp:
        pythons = {"nemo_lens": venv(os.path.join(tmp, "nemo"), "nemo-lens==0.1.0", "opentelemetry-sdk==1.45.2"),
                   "lens": venv(os.path.join(tmp, "lens"), lens_wheel(), "opentelemetry-sdk==1.45.2")}
        results = {}
        for library, python in pythons.items():
            command = [python, os.path.abspath(__file__), "--child", library, "--rounds", str(rounds),
                       "--burst", str(burst), *(["--quick"] if args.quick else [])]
            results[library] = json.loads(run(command, cwd=tmp).stdout.strip().splitlines()[-1])
            burst_line = run([*command, "--burst-only"], cwd=tmp).stdout.strip().splitlines()[-1]
            results[library]["sdk exporter burst"] = json.loads(burst_line)
            for preset in MEGATRON_PRESETS:
                line = run([*command, "--megatron", preset], cwd=tmp).stdout.strip().splitlines()[-1]
                results[library][f"megatron {preset}"] = json.loads(line)
        floor = run([pythons["nemo_lens"], os.path.abspath(__file__), "--child", "nemo_lens", "--otel-api-floor",
                     "--rounds", str(rounds)], cwd=tmp).stdout.strip().splitlines()[-1]
        results["otel_api_floor"] = json.loads(floor)
    print(f"CPython {results['lens']['python']}, {platform.machine()}, {os.cpu_count()} cores, {rounds} rounds of "
          f"{BATCH} calls a path (medians)")
    print(table(results))


if __name__ == "__main__":
    main()
