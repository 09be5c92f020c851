#!/usr/bin/python3
"""What a span costs from Python, each case beside a baseline measured in the same run (CONTRACT §11).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_span_benchmark.py [--rounds 15] [--quick]

Cases, their baselines and the bounds they are held to:
  - a disabled `with managed_span(group, name, a=1, b=2):`  vs `with contextlib.nullcontext():`   (within 1.5x)
  - is_span_group_enabled(group)                             vs len(x), a C builtin call          (within 2x)
  - a call of a @trace_fn function, group off               vs the same function via functools.partial (2x)
  - an enabled span with 2 attributes, recorded and exported (the file exporter; flush included)    (< 1.5 us)
  - `with step_phase("compute"):` (the straggler search's phase scope) vs `with contextlib.nullcontext():`
"Disabled" is measured twice: telemetry off (no setup: every group off, one atomic load) and on an exporting rank
with the span's group off (a dict lookup of the group's name as well): the second is what a fine group costs in
production. Each round times every case once, in turn; a figure is the median over rounds of ns per operation,
and a ratio the median over rounds of case / baseline in the same round. Exported spans: the drop ratio is printed
beside the figure (a dropped span would measure the drop path). Figures and machine: docs/PERFORMANCE.md.
"""

import argparse
import contextlib
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit

import lens
from lens.helpers import is_span_group_enabled, managed_span, trace_fn

GROUP = lens.SpanGroup.STEP


def work():
    return None


traced_work = trace_fn(GROUP, "bench.traced")(work)
partial_work = functools.partial(work)
items = [1, 2, 3]

CASES = {  # name: (statement, baseline name or None)
    "nullcontext": ("with nullcontext():\n    pass", None),
    "managed_span": ("with managed_span(GROUP, 'bench.span', a=1, b=2):\n    pass", "nullcontext"),
    "len": ("len(items)", None),
    "is_span_group_enabled": ("is_span_group_enabled(GROUP)", "len"),
    "partial_call": ("partial_work()", None),
    "trace_fn_call": ("traced_work()", "partial_call"),
    # lens/straggler.h's phase scope: off without a setup, on (STRAGGLER_INTERVAL=20) in the setups below
    "step_phase": ("with step_phase('compute'):\n    pass", "nullcontext"),
}
NAMESPACE = {"nullcontext": contextlib.nullcontext, "managed_span": managed_span, "GROUP": GROUP,
             "items": items, "is_span_group_enabled": is_span_group_enabled, "partial_work": partial_work,
             "traced_work": traced_work, "step_phase": lens.step_phase}


def per_op_ns(statement, number):
    return timeit.Timer(statement, globals=NAMESPACE).timeit(number) / number * 1e9


def measure_disabled(rounds, number):
    samples = {name: [] for name in CASES}
    for _ in range(rounds):
        for name, (statement, _) in CASES.items():
            samples[name].append(per_op_ns(statement, number))
    return samples


def report_disabled(title, samples):
    print(f"\n{title}")
    print(f"  {'case':<24}{'median ns/op':>14}{'baseline':>16}{'median ratio':>14}")
    for name, (_, baseline) in CASES.items():
        if baseline is None:
            continue
        ratio = statistics.median(c / b for c, b in zip(samples[name], samples[baseline]))
        print(f"  {name:<24}{statistics.median(samples[name]):14.1f}{baseline:>16}{ratio:14.2f}"
              f"   (baseline {statistics.median(samples[baseline]):.1f} ns)")


@contextlib.contextmanager
def telemetry(groups, directory, **settings):
    saved = dict(os.environ)
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=directory,
                      NEMO_LENS_SPAN_GROUPS=groups, NEMO_LENS_METRICS_ENABLED="0", **settings)
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1, _allow_reinit=True)
    try:
        yield handle
    finally:
        handle.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def measure_enabled(handle, rounds, number):
    """ns per span on the calling thread; per span with the flush of its export included; and the process's CPU
    time per span over both (every thread: the export thread's encoding and writing too)."""
    clock = timeit.default_timer
    recorded, exported, cpu = [], [], []
    baseline = []
    for _ in range(rounds):
        baseline.append(per_op_ns(CASES["nullcontext"][0], number))
        cpu_start = time.process_time()
        start = clock()
        for _ in range(number):
            with managed_span(GROUP, "bench.span", a=1, b=2):
                pass
        loop = clock() - start
        handle.force_flush(60000)
        flushed = clock() - start
        recorded.append(loop / number * 1e9)
        exported.append(flushed / number * 1e9)
        cpu.append((time.process_time() - cpu_start) / number * 1e9)
    return recorded, exported, cpu, baseline


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=200_000, help="operations per timing")
    parser.add_argument("--quick", action="store_true", help="a few rounds of few operations: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.number = 2, 2000
    print(f"python_span_benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, lens {lens.__version__}; {args.rounds} rounds of {args.number} ops")

    report_disabled("disabled, telemetry off (no setup)", measure_disabled(args.rounds, args.number))
    with tempfile.TemporaryDirectory(prefix="lens-bench-") as directory:
        with telemetry("job", directory):  # an exporting rank; the benchmark's group (step) is off
            report_disabled("disabled, exporting rank, the span's group off",
                            measure_disabled(args.rounds, args.number))
        number = max(args.number // 4, 1)
        # A queue that holds a round: the loop makes spans faster than the file exporter encodes them, and a round
        # that overflowed the default queue would time the drop path.
        with telemetry("all", directory, OTEL_BSP_MAX_QUEUE_SIZE=str(max(2048, 2 * number))) as handle:
            recorded, exported, cpu, baseline = measure_enabled(handle, args.rounds, number)
            stats = handle.span_stats()
        produced = stats["produced"]
        drop = stats["dropped"] / produced if produced else 0.0
        print("\nenabled: `with managed_span(group, name, a=1, b=2)`, recorded and exported (file exporter, a queue "
              "that holds a round)")
        print(f"  recorded (training thread)      median {statistics.median(recorded):8.1f} ns/span"
              f"   ratio to nullcontext {statistics.median(r / b for r, b in zip(recorded, baseline)):.2f}")
        print(f"  recorded and exported (flushed) median {statistics.median(exported):8.1f} ns/span"
              f"   dropped {stats['dropped']} of {produced} ({100 * drop:.3f} %)")
        print(f"  process CPU, every thread       median {statistics.median(cpu):8.1f} ns/span")
    return 0


if __name__ == "__main__":
    sys.exit(main())
