#!/usr/bin/env python3
"""Bytes per trace of a run's OTLP/JSON Lines files: each span serialised compactly, summed per trace id.

    scripts/trace_bytes.py RUN_DIR     # prints the step traces' and the largest trace's sizes

The figures of docs/PERFORMANCE.md (bytes per step trace against Tempo's 5 MB) come from it. Lines that do not
parse (a torn last line) are skipped.
"""
import collections
import json
import pathlib
import statistics
import sys


def main(run_dir):
    size, spans, steps = collections.Counter(), collections.Counter(), set()
    for path in pathlib.Path(run_dir).rglob("rank*.traces.jsonl"):
        for line in path.open():
            try:
                request = json.loads(line)
            except ValueError:
                continue
            for resource_spans in request.get("resourceSpans", []):
                for scope_spans in resource_spans.get("scopeSpans", []):
                    for span in scope_spans.get("spans", []):
                        size[span["traceId"]] += len(json.dumps(span, separators=(",", ":")))
                        spans[span["traceId"]] += 1
                        if span["name"] in ("megatron.train_step", "megatron.train.iteration"):
                            steps.add(span["traceId"])
    if not size:
        sys.exit(f"trace_bytes: no spans under {run_dir}")
    print(f"traces: {len(size)}; largest: {max(size.values())} bytes")
    if steps:
        per_step = [size[t] for t in steps]
        print(f"step traces: {len(steps)}; bytes per step trace: median {statistics.median(per_step):.0f}, "
              f"max {max(per_step)}; spans per step trace: median {statistics.median(spans[t] for t in steps):.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
