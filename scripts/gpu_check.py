"""The hardware check of device timing (docs/GPU.md): on a machine with a GPU and a CUDA build of PyTorch, a matmul
loop timed two ways at once, by lens's device spans (DEVICE_TIMING=cuda) and by torch.cuda.Event pairs recorded inside
the same spans; each iteration's two figures must agree within 5 % (lens's pair brackets PyTorch's, so it reads a
little longer). Exit 0: agreed; 1: did not; 2: no PyTorch; 77: no GPU here, nothing checked.

    scripts/gpu_check.sh [--iterations N] [--size N]
"""

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

TOLERANCE = 0.05
NO_GPU = 77


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--size", type=int, default=4096, help="the square matrices' side")
    parser.add_argument("--matmuls", type=int, default=4, help="matmuls per timed iteration")
    return parser.parse_args()


def device_spans(directory):
    spans = []
    for path in glob.glob(os.path.join(directory, "*", "*.traces.jsonl")):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                for resource_spans in json.loads(line)["resourceSpans"]:
                    for scope in resource_spans["scopeSpans"]:
                        spans.extend(scope["spans"])
    return spans


def main():
    args = parse_args()
    try:
        import torch  # here, so that --help works without it
    except ImportError:
        print(f"gpu_check: no PyTorch in {sys.executable} (LENS_GPU_PYTHON chooses the interpreter)", file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device for PyTorch here (torch %s, built for CUDA: %s): nothing checked"
              % (torch.__version__, torch.version.cuda), file=sys.stderr)
        return NO_GPU
    directory = tempfile.mkdtemp(prefix="lens-gpu-check-")
    os.environ.update(MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_EXPORTER="file", MEGATRON_OTEL_FILE_DIR=directory,
                      MEGATRON_OTEL_SPAN_GROUPS="all", MEGATRON_OTEL_DEVICE_TIMING="cuda",
                      MEGATRON_OTEL_DEVICE_SPAN_GROUPS="layer")
    import lens
    from lens.helpers import managed_span
    from lens.megatron import MegatronSpanGroup

    config = lens.NemoLensConfig.from_env(prefix="MEGATRON_OTEL", span_group_cls=MegatronSpanGroup)
    handle = lens.setup_telemetry(config, rank=0, world_size=1)
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    for _ in range(3):  # warm-up: cuBLAS's handles and kernels chosen
        a @ b
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    lens.set_device_stream(stream)
    pairs = []
    for i in range(args.iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with managed_span(MegatronSpanGroup.LAYER, "gpu_check.matmul", **{"gpu_check.iteration": i}):
            start.record(stream)
            for _ in range(args.matmuls):
                a @ b
            end.record(stream)
        pairs.append((start, end))
    torch.cuda.synchronize()
    handle.shutdown()
    torch_ms = [s.elapsed_time(e) for s, e in pairs]

    by_iteration = {}
    host = {s["spanId"]: s for s in device_spans(directory) if s["name"] == "gpu_check.matmul"}
    for span in device_spans(directory):
        if span["name"] == "gpu_check.matmul.device" and span["parentSpanId"] in host:
            attributes = {a["key"]: a["value"] for a in host[span["parentSpanId"]].get("attributes", [])}
            iteration = int(attributes["gpu_check.iteration"]["intValue"])
            by_iteration[iteration] = (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6
    missing = [i for i in range(args.iterations) if i not in by_iteration]
    print(f"gpu_check: {torch.cuda.get_device_name()}, {args.iterations} iterations of {args.matmuls} matmuls "
          f"{args.size}x{args.size}; lens's device spans: {len(by_iteration)} (telemetry in {directory})")
    if missing:
        print(f"gpu_check: FAIL: no device span for iterations {missing[:10]}", file=sys.stderr)
        return 1
    errors = [(by_iteration[i] - torch_ms[i]) / torch_ms[i] for i in range(args.iterations)]
    print(f"  median: lens {statistics.median(by_iteration.values()):.3f} ms, torch.cuda.Event "
          f"{statistics.median(torch_ms):.3f} ms; relative difference median {statistics.median(errors):+.2%}, "
          f"worst {max(errors, key=abs):+.2%}")
    bad = [i for i, e in enumerate(errors) if abs(e) > TOLERANCE]
    if bad:
        print(f"gpu_check: FAIL: {len(bad)} iterations differ by more than {TOLERANCE:.0%}: {bad[:10]}",
              file=sys.stderr)
        return 1
    print("gpu_check: PASS: every iteration within 5 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
