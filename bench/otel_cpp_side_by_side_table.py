"""One round of bench/otel_cpp_side_by_side.sh as a table: Google Benchmark's JSON medians, free and pinned, each
lens row beside OpenTelemetry C++'s, the ratio, the drop ratios and lens's figure over the floor of the same run; then
the bars of docs/PERFORMANCE.md, each said to hold or not (exit status 1 when one does not).

    python3 bench/otel_cpp_side_by_side_table.py FREE.json PINNED.json
"""
import json
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    title: str
    name: str  # the benchmark's name between BM_ and _Lens / _OtelCpp
    records: bool  # a kept span (its floor: two span-clock reads) or one that records nothing (one atomic load)
    suffix: str = ""
    counter: str = ""  # a counter of the row's run rather than its time


ROWS = [
    Row("a current span, no attributes", "CurrentSpan", True),
    Row("4 attributes (2 int, 1 double, 1 literal string)", "FourAttributes", True),
    Row("a child of the current span", "Child", True),
    Row("a span not made current", "NotCurrent", True),
    Row("2 producer threads (wall clock a span)", "TwoProducers", True, "/real_time/threads:2"),
    Row("the whole process's CPU a kept span (a current span)", "CurrentSpan", True, counter="process_cpu_ns"),
    Row("under a parent that was sampled out", "SampledOut", False),
    Row("`always_off`", "AlwaysOff", False),
    Row("switched off: a disabled group / a disabled tracer", "Disabled", False),
]
MIN_RATIO = 10.0


def medians(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    return {r["run_name"]: r for r in runs if r.get("aggregate_name") == "median"}


def figure(runs, name, row=None):
    run = runs[name]
    return run[row.counter] if row is not None and row.counter else run["real_time"]


def table(free, pinned):
    floors = {mode: (figure(runs, "BM_Floor_TwoSpanClockReads"), figure(runs, "BM_Floor_RelaxedAtomicLoad"))
              for mode, runs in (("free", free), ("pinned", pinned))}
    print("| case | lens free (ns) | OpenTelemetry C++ free (ns) | x | lens pinned (ns) "
          "| OpenTelemetry C++ pinned (ns) | x | dropped, lens / OpenTelemetry C++ "
          "| lens over its floor (free / pinned) |")
    print("|---|---|---|---|---|---|---|---|---|")
    failures = []
    for row in ROWS:
        cells, lens_over_floor = [], []
        drops = []
        for mode, runs in (("free", free), ("pinned", pinned)):
            lens_name, otel_name = f"BM_{row.name}_Lens{row.suffix}", f"BM_{row.name}_OtelCpp{row.suffix}"
            lens, otel = figure(runs, lens_name, row), figure(runs, otel_name, row)
            ratio = otel / lens
            cells += [f"{lens:.3g}", f"{otel:,.4g}", f"{ratio:.1f}x"]
            floor = floors[mode][0] if row.records else floors[mode][1]
            lens_over_floor.append(f"{lens / floor:.2f}x")
            if ratio < MIN_RATIO:
                failures.append(f"{row.title}, {mode}: {ratio:.1f}x, under {MIN_RATIO:.0f}x")
            for name in (lens_name, otel_name):
                drop = runs[name].get("drop_ratio")
                if drop is not None:
                    drops.append(drop)
                    if drop > 0:
                        failures.append(f"{row.title}, {mode}: {name} dropped {drop:.2%}")
        dropped = " / ".join(f"{d:.0%}" for d in drops[:2]) if drops else "(nothing recorded)"
        print(f"| {row.title} | " + " | ".join(cells) + f" | {dropped} | {' / '.join(lens_over_floor)} |")
    for mode, runs in (("free", free), ("pinned", pinned)):
        clock, load = floors[mode]
        print(f"floor, {mode}: two span-clock reads {clock:.3g} ns, two steady_clock::now() "
              f"{figure(runs, 'BM_Floor_TwoSteadyClockReads'):.3g} ns, a relaxed atomic load {load:.3g} ns")
    return failures


def lens_bars(free, pinned):
    """lens against itself: (what, figure, bound) for each bar, free and pinned."""
    bars = []
    for mode, runs in (("free", free), ("pinned", pinned)):
        def lens(name):
            return figure(runs, f"BM_{name}_Lens")
        bars += [
            (f"{mode}: a span not made current <= a current span", lens("NotCurrent"), lens("CurrentSpan")),
            (f"{mode}: always_off <= 2 x a disabled group", lens("AlwaysOff"), 2 * lens("Disabled")),
            (f"{mode}: a disabled group <= 2 x a relaxed atomic load", lens("Disabled"),
             2 * figure(runs, "BM_Floor_RelaxedAtomicLoad")),
        ]
    return bars


def main(free_path, pinned_path):
    free, pinned = medians(free_path), medians(pinned_path)
    failures = table(free, pinned)
    for failure in failures:
        print(f"FAILS: {failure}")
    for what, value, bound in lens_bars(free, pinned):
        holds = value <= bound
        print(f"{'holds' if holds else 'FAILS'}: {what} ({value:.3g} ns against {bound:.3g} ns)")
        if not holds:
            failures.append(what)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
