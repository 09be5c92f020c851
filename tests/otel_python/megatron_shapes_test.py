"""Today's Megatron-LM call shapes on lens: megatron_shapes.py performs them as Megatron does; with lens
and opentelemetry-api the spans, parentage, links, back-dated times, attributes and metrics are what Megatron
intends; with neither, the same code runs its no-op path. Run by .venv's interpreter (the real OpenTelemetry API)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

from support import attributes, json_lines  # noqa: E402


def run_shapes(env, out_dir):
    out = os.path.join(out_dir, "out.json")
    result = subprocess.run([sys.executable, os.path.join(HERE, "megatron_shapes.py"), out], env=env,
                            capture_output=True, text=True, timeout=120)
    return result, out


class MegatronShapesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="lens-megatron-shapes-")
        self.addCleanup(self.dir.cleanup)

    def run_with_lens(self):
        env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "NEMO_LENS_"))}
        env.update(MEGATRON_OTEL_SPAN_GROUPS="per_step,communication", MEGATRON_OTEL_EXPORTER="file",
                   MEGATRON_OTEL_FILE_DIR=os.path.join(self.dir.name, "telemetry"),
                   MEGATRON_OTEL_RANK_STRATEGY="all_ranks",
                   MEGATRON_OTEL_HANG_SIGNAL="none")
        result, out = run_shapes(env, self.dir.name)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        with open(out, encoding="utf-8") as said:
            said = json.load(said)
        spans = [s for d in json_lines(env["MEGATRON_OTEL_FILE_DIR"], "traces") for r in d["resourceSpans"]
                 for scope in r["scopeSpans"] for s in scope["spans"]]
        metrics = [m for d in json_lines(env["MEGATRON_OTEL_FILE_DIR"], "metrics") for r in d["resourceMetrics"]
                   for scope in r["scopeMetrics"] for m in scope["metrics"]]
        return said, spans, metrics

    def test_megatron_s_calls_record_what_megatron_intends(self):
        said, spans, metrics = self.run_with_lens()
        self.assertTrue(said["live"])
        by_id = {s["spanId"]: s for s in spans}
        named = {}
        for span in spans:
            named.setdefault(span["name"], []).append(span)

        def one(name):
            self.assertEqual(len(named.get(name, [])), 1, f"{name}: {sorted(named)}")
            return named[name][0]

        def parent(span):
            return by_id[span["parentSpanId"]]["name"] if "parentSpanId" in span else None

        nanos = {key: int(value * 1e9) for key, value in said["stamps"].items()}
        pre, startup = one("pre_startup"), one("megatron.startup")
        self.assertEqual((parent(pre), parent(startup)), (None, None))
        self.assertNotEqual(pre["traceId"], startup["traceId"])
        self.assertEqual((int(pre["startTimeUnixNano"]), int(pre["endTimeUnixNano"])),
                         (nanos["slurm_job_start_time"], nanos["launch_script_start"]))
        self.assertEqual(int(startup["startTimeUnixNano"]), nanos["launch_script_start"])
        self.assertEqual(attributes(startup)["megatron.model_type"], "ModelType.encoder_or_decoder")
        for name, start, end in (("megatron.startup.launch_script", "launch_script_start", "launch_script_presrun"),
                                 ("megatron.startup.container_load", "launch_script_presrun", "program_start")):
            child = one(name)
            self.assertEqual(parent(child), "megatron.startup")
            self.assertEqual((int(child["startTimeUnixNano"]), int(child["endTimeUnixNano"])),
                             (nanos[start], nanos[end]))
            self.assertTrue(attributes(child)["is_goodput_span"])

        intervals = sorted(named["megatron.train"], key=lambda s: int(s["startTimeUnixNano"]))
        self.assertEqual(len(intervals), 2)
        self.assertEqual([parent(s) for s in intervals], [None, None])
        self.assertEqual(intervals[0]["links"][0]["spanId"], startup["spanId"])   # the first block: startup
        self.assertEqual(intervals[1]["links"][0]["spanId"], intervals[0]["spanId"])  # then a chain
        self.assertNotEqual(intervals[0]["traceId"], intervals[1]["traceId"])

        steps = named["megatron.train.iteration"]
        self.assertEqual(len(steps), 4)
        for step in steps:
            self.assertEqual(parent(step), "megatron.train")
            self.assertIn("megatron.loss", attributes(step))
        for fb in named["megatron.train.iteration.forward_backward"]:
            self.assertEqual(parent(fb), "megatron.train.iteration")
        linked = named["megatron.pp.recv_forward.linked"]  # ended with .end(), not `with`
        self.assertEqual(len(linked), 4)
        for span in linked:
            self.assertEqual(parent(span), "megatron.train.iteration.forward_backward")
            self.assertEqual(span["links"][0]["spanId"], startup["spanId"])  # the carrier's context
            self.assertEqual(attributes(span)["dl.pipeline_parallel.rank"], 1)

        exposed = named["megatron.checkpoint.exposed_save"]
        saves = named["megatron.checkpoint.save"]
        self.assertEqual((len(exposed), len(saves)), (2, 2))
        for save in saves:
            self.assertEqual(parent(save), "megatron.checkpoint.exposed_save")
            self.assertIn(attributes(save)["nvrx.call_idx"], (1, 3))  # on the current span, from the OTel API
        for span in exposed:
            self.assertEqual(parent(span), "megatron.train")
        self.assertEqual(attributes(one("megatron.evaluate"))["megatron.eval_iters"], 3)

        by_name = {m["name"]: m for m in metrics}
        self.assertEqual(by_name["megatron.training.step_duration_ms"]["histogram"]["dataPoints"][0]["count"], "4")
        self.assertAlmostEqual(by_name["megatron.training.loss"]["gauge"]["dataPoints"][0]["asDouble"], 2.2)
        self.assertEqual(by_name["megatron.training.skipped_iters"]["sum"]["dataPoints"][0]["asDouble"], 4)

    def test_without_lens_the_same_code_runs_its_no_op_path(self):
        env = {**os.environ, "PYTHONPATH": ""}  # neither lens nor its compat shim importable
        env.update(MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_FILE_DIR=os.path.join(self.dir.name, "telemetry"))
        result, out = run_shapes(env, self.dir.name)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        with open(out, encoding="utf-8") as said:
            self.assertFalse(json.load(said)["live"])
        self.assertFalse(os.path.exists(env["MEGATRON_OTEL_FILE_DIR"]))


if __name__ == "__main__":
    unittest.main()
