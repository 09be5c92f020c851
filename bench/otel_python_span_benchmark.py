#!/usr/bin/env python3
"""lens's Python span beside the OpenTelemetry Python SDK's, in the same interpreter and the same run.

    PYTHONPATH=build/python .venv/bin/python bench/otel_python_span_benchmark.py [--rounds 15] [--quick]

Every case is `with <span>("bench.span", a=1, b=2): pass`, with the baseline `with contextlib.nullcontext():`
timed in the same round:
  - lens: managed_span on an exporting rank, every group on; the file exporter (its background thread encodes
    OTLP/JSON and writes it: more work than the SDK's discarding exporter, none of it on the calling thread).
  - the OpenTelemetry API served by lens: trace.get_tracer(...).start_as_current_span (Megatron's own calls), the
    same pipeline; and the SDK again once lens serves OpenTelemetry's runtime context in the process.
  - the SDK: tracer.start_as_current_span in a TracerProvider with a BatchSpanProcessor whose exporter discards
    (and counts) what it gets; once with the processor's defaults (queue 2048: it drops when the loop outruns it)
    and once with a queue that holds a whole round (drops nothing).
A figure is the median over rounds of ns per span on the calling thread, and of ns per span with the flush that
ends the round (what reaches the exporter, encoded or not); CPU is the process's, every thread. Beside each, the
drop ratio: a dropped span measures the drop path. Figures and machine: docs/PERFORMANCE.md.
"""

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit

import lens
from lens.helpers import managed_span
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.version import __version__ as otel_version


class DiscardingExporter(SpanExporter):
    def __init__(self):
        self.spans = 0

    def export(self, spans):
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def nullcontext_ns(number):
    return timeit.Timer("with nullcontext():\n    pass", globals={"nullcontext": contextlib.nullcontext}
                        ).timeit(number) / number * 1e9


def timed_rounds(make_span, flush, rounds, number):
    """Per round: (calling thread ns/span, ns/span with the flush, process CPU ns/span, baseline ns)."""
    out = []
    for _ in range(rounds):
        baseline = nullcontext_ns(number)
        cpu, start = time.process_time(), timeit.default_timer()
        for _ in range(number):
            with make_span():
                pass
        loop = timeit.default_timer() - start
        flush()
        flushed = timeit.default_timer() - start
        out.append((loop / number * 1e9, flushed / number * 1e9, (time.process_time() - cpu) / number * 1e9,
                    baseline))
    return out


def print_row(title, samples, dropped, made):
    median = lambda i: statistics.median(s[i] for s in samples)  # noqa: E731
    ratio = statistics.median(s[0] / s[3] for s in samples)
    print(f"  {title:<52}{median(0):9.1f}{median(1):10.1f}{median(2):9.1f}{ratio:8.1f}x"
          f"   dropped {dropped} of {made} ({100 * dropped / made if made else 0:.2f} %)")


def bench_lens(rounds, number, directory, through_otel_api=False):
    """lens's managed_span, or (through_otel_api) OpenTelemetry's API served by lens:
    opentelemetry.trace.get_tracer(...).start_as_current_span, the call Megatron's own code makes."""
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=directory,
                      NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_METRICS_ENABLED="0", NEMO_LENS_HANG_SIGNAL="none")
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1, _allow_reinit=True)
    if through_otel_api:
        tracer = trace.get_tracer("bench")  # lens's, once set up
        make = lambda: tracer.start_as_current_span("bench.span", attributes={"a": 1, "b": 2})  # noqa: E731
    else:
        group = lens.SpanGroup.STEP
        make = lambda: managed_span(group, "bench.span", a=1, b=2)  # noqa: E731
    samples = timed_rounds(make, lambda: handle.force_flush(60000), rounds, number)
    handle.shutdown()
    stats = handle.span_stats()
    return samples, stats["dropped"], stats["produced"]


def bench_otel(rounds, number, queue_size):
    exporter = DiscardingExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    options = {} if queue_size is None else {"max_queue_size": queue_size}
    provider.add_span_processor(BatchSpanProcessor(exporter, **options))
    tracer = provider.get_tracer("bench")
    samples = timed_rounds(lambda: tracer.start_as_current_span("bench.span", attributes={"a": 1, "b": 2}),
                           lambda: provider.force_flush(60000), rounds, number)
    provider.shutdown()
    made = rounds * number
    return samples, made - exporter.spans, made


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000, help="spans per round")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2,000 spans: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.number = 2, 2000
    print(f"otel_python_span_benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, lens {lens.__version__}, opentelemetry-sdk {otel_version}; "
          f"{args.rounds} rounds of {args.number} spans")
    print(f"  {'case (2 attributes)':<52}{'ns/span':>9}{'+flush':>10}{'CPU':>9}{'vs null':>9}")
    # The SDK alone first: once lens is set up it serves OpenTelemetry's runtime context, which the SDK then uses.
    print_row("OTel SDK, BatchSpanProcessor defaults", *bench_otel(args.rounds, args.number, None))
    print_row("OTel SDK, BatchSpanProcessor, queue holds a round",
              *bench_otel(args.rounds, args.number, args.number))
    with tempfile.TemporaryDirectory(prefix="lens-bench-") as directory:
        print_row("lens managed_span (file exporter)", *bench_lens(args.rounds, args.number, directory))
    with tempfile.TemporaryDirectory(prefix="lens-bench-") as directory:
        print_row("OTel API start_as_current_span on lens (file exp.)",
                  *bench_lens(args.rounds, args.number, directory, through_otel_api=True))
    print_row("OTel SDK beside lens (lens's runtime context)", *bench_otel(args.rounds, args.number, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
