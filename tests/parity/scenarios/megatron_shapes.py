"""Megatron-LM's telemetry call shapes (tests/otel_python/megatron_shapes.py, Megatron's own MegatronSpanGroup
subclass, per_step and communication, every rank exporting): the back-dated startup spans, the re-rooted interval
blocks with links, the steps with their trace_fn and linked spans, the checkpoint save, evaluation, the training
metrics."""
import os
import runpy
import tempfile

os.environ.update(MEGATRON_OTEL_SPAN_GROUPS="per_step,communication", MEGATRON_OTEL_EXPORT_STRATEGY="all_ranks",
                  MEGATRON_OTEL_RANK_STRATEGY="all_ranks")

from capture import note  # noqa: E402

shapes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "otel_python", "megatron_shapes.py")
with tempfile.TemporaryDirectory() as out:
    said = os.path.join(out, "said.json")
    runpy.run_path(shapes, run_name="megatron_shapes")["main"](said)
    with open(said, encoding="utf-8") as f:
        note("live", __import__("json").load(f)["live"])
