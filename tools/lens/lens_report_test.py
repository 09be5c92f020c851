"""`lens report` on runs written by a fixture with known answers, and on bad input: every figure exact, every
problem reported with file and line while the rest is still read, exit codes scripts can use."""

import gzip
import json
import os
import socket
import subprocess
import tempfile
import unittest

LENS = os.environ.get("LENS_TOOL", "lens")
MS = 1_000_000


def attr(key, value):
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def resource(rank, world=2, pid=None):
    return {"attributes": [attr("service.name", "megatron-lm"), attr("nemo.run.id", "run-7"), attr("dl.rank", rank),
                           attr("process.pid", pid if pid is not None else 100 + rank),
                           attr("dl.world_size", world), attr("dl.pipeline_parallel.size", 1),
                           attr("dl.data_parallel.size", world)]}


def span(name, start_ms, duration_ms, **attributes):
    start = 1_700_000_000_000 * MS + start_ms * MS
    return {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + duration_ms * MS),
            "attributes": [attr(k.replace("_", "."), v) for k, v in attributes.items()]}


def spans_line(rank, spans):
    return json.dumps({"resourceSpans": [{"resource": resource(rank),
                                          "scopeSpans": [{"scope": {"name": "lens"}, "spans": spans}]}]})


def metrics_line(rank, time_ms, points, pid=None):
    metrics = []
    for name, value, reason in points:
        point = {"timeUnixNano": str(time_ms * MS), ("asDouble" if isinstance(value, float) else "asInt"):
                 value if isinstance(value, float) else str(value)}
        if reason:
            point["attributes"] = [attr("reason", reason)]
        kind = "gauge" if name.startswith("megatron.training") else "sum"
        metrics.append({"name": name, kind: {"dataPoints": [point]}})
    return json.dumps({"resourceMetrics": [{"resource": resource(rank, pid=pid),
                                            "scopeMetrics": [{"scope": {"name": "lens"}, "metrics": metrics}]}]})


# Step times (ms) per iteration and rank: rank 1 is slower in iterations 2 and 3.
STEPS = {1: {0: 100, 1: 110}, 2: {0: 100, 1: 150}, 3: {0: 90, 1: 200}, 4: {0: 120, 1: 100}}


def write_run(directory, gz=False):
    run = os.path.join(directory, "run-7")
    os.makedirs(run)
    for rank in (0, 1):
        lines = []
        for iteration, by_rank in STEPS.items():
            lines.append(spans_line(rank, [span("megatron.train_step", iteration * 1000, by_rank[rank],
                                                megatron_iteration=iteration, megatron_loss=6.0 - iteration / 2),
                                           span("megatron.forward_backward", iteration * 1000, by_rank[rank] - 10)]))
        opener = gzip.open if gz else open
        suffix = ".gz" if gz and rank == 1 else ""
        with (opener if suffix else open)(os.path.join(run, f"rank{rank}.traces.jsonl{suffix}"), "wt") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(run, f"rank{rank}.metrics.jsonl"), "w") as f:
            f.write(metrics_line(rank, 1000, [("lens.spans.exported", 4, None), ("lens.spans.dropped", 1, "queue_full"),
                                              ("megatron.training.loss", 5.5, None)]) + "\n")
            f.write(metrics_line(rank, 2000, [("lens.spans.exported", 8, None), ("lens.spans.dropped", 2, "queue_full"),
                                              ("megatron.training.loss", 4.25, None)]) + "\n")
            # The rank's checkpoint worker: the same rank, another process, its own counters, written last.
            f.write(metrics_line(rank, 3000, [("lens.spans.exported", 3, None)], pid=900 + rank) + "\n")
    return run


def lens(*args):
    return subprocess.run([LENS, *args], capture_output=True, text=True, timeout=60)


class ReportFiguresTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = write_run(self.tmp.name, gz=True)

    def tearDown(self):
        self.tmp.cleanup()

    def figures(self, *extra):
        result = lens("report", self.run, "--json", *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_identity_percentiles_steps_loss_and_losses(self):
        f = self.figures()
        self.assertEqual(f["run"]["run_ids"], ["run-7"])
        self.assertEqual((f["run"]["ranks"], f["run"]["world_size"]), ([0, 1], 2))
        steps = {s["name"]: s for s in f["spans"]}["megatron.train_step"]
        durations = sorted(ms for by_rank in STEPS.values() for ms in by_rank.values())  # 8 values
        self.assertEqual(steps["count"], 8)
        self.assertEqual(steps["p50_ms"], durations[3])   # nearest rank: ceil(0.5 * 8) = 4th
        self.assertEqual(steps["p90_ms"], durations[7])   # ceil(7.2) = 8th
        self.assertEqual(steps["max_ms"], 200)
        table = {s["iteration"]: s for s in f["steps"]}
        self.assertEqual(sorted(table), [1, 2, 3, 4])
        self.assertEqual((table[3]["median_ms"], table[3]["max_ms"], table[3]["slowest_rank"]), (145, 200, 1))
        self.assertEqual(table[4]["slowest_rank"], 0)
        self.assertEqual(f["loss"], [{"iteration": i, "loss": 6.0 - i / 2} for i in (1, 2, 3, 4)])
        self.assertEqual(f["lost"]["spans_exported"], 16 + 6)  # the last value of each process: 2 ranks, 2 workers
        self.assertEqual(f["lost"]["dropped_by_reason"], {"queue_full": 4})
        self.assertEqual(f["read"]["problems"], [])

    def test_steps_limits_the_step_table(self):
        f = self.figures("--steps", "2-3")
        self.assertEqual([s["iteration"] for s in f["steps"]], [2, 3])
        self.assertEqual({s["name"]: s for s in f["spans"]}["megatron.train_step"]["count"], 8)

    def test_the_text_form(self):
        result = lens("report", self.run)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("run run-7  service megatron-lm  2 ranks seen of 2", result.stdout)
        self.assertRegex(result.stdout, r"megatron.train_step\s+8\s+")
        self.assertIn("lost: 4 spans dropped, 22 exported", result.stdout)


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_truncated_last_line_and_a_foreign_file_are_reported_and_the_rest_read(self):
        run = write_run(self.tmp.name)
        with open(os.path.join(run, "rank0.traces.jsonl"), "a") as f:
            f.write(spans_line(0, [span("megatron.train_step", 9000, 50, megatron_iteration=9)])[:-40])
        with open(os.path.join(run, "notes.jsonl"), "w") as f:
            f.write('{"hello": "world"}\nnot json at all\n')
        result = lens("report", run, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        f = json.loads(result.stdout)
        problems = {(os.path.basename(p["file"]), p["line"]) for p in f["read"]["problems"]}
        self.assertEqual(problems, {("rank0.traces.jsonl", 5), ("notes.jsonl", 1), ("notes.jsonl", 2)})
        self.assertIn("truncated", " ".join(p["what"] for p in f["read"]["problems"]))
        self.assertIn("rank0.traces.jsonl:5:", result.stderr)
        self.assertEqual([s["iteration"] for s in f["steps"]], [1, 2, 3, 4])

    def test_a_truncated_gzip_file_is_reported_and_the_other_files_read(self):
        run = write_run(self.tmp.name, gz=True)
        path = os.path.join(run, "rank1.traces.jsonl.gz")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        result = lens("report", run, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        f = json.loads(result.stdout)
        problems = [p for p in f["read"]["problems"] if p["file"].endswith("rank1.traces.jsonl.gz")]
        # the partial line the stream ends in, and the stream's own error
        self.assertEqual([p["what"].split(" (")[0] for p in problems][0], "a truncated last line")
        self.assertIn("cannot be read past here", problems[-1]["what"])
        self.assertIn("unexpected end of file", problems[-1]["what"])
        self.assertEqual({s["iteration"]: s["ranks"] for s in f["steps"]}[1], 1)  # rank 0's file is whole

    def test_nothing_to_read_is_exit_2(self):
        result = lens("report", self.tmp.name)
        self.assertEqual(result.returncode, 2)
        self.assertIn("no telemetry files", result.stderr)
        self.assertEqual(lens("report", os.path.join(self.tmp.name, "missing")).returncode, 2)
        with open(os.path.join(self.tmp.name, "empty.jsonl"), "w"):
            pass
        result = lens("report", self.tmp.name)
        self.assertEqual(result.returncode, 2)
        self.assertIn("no span", result.stderr)

    def test_a_malformed_steps_range_is_exit_2(self):
        run = write_run(self.tmp.name)
        for bad in ("x", "5-2", "1-"):
            with self.subTest(steps=bad):
                result = lens("report", run, "--steps", bad)
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertIn("--steps", result.stderr)


@unittest.skipUnless(os.environ.get("LENS_PRETRAIN_GPT"), "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class RealRunTest(unittest.TestCase):
    def test_a_pretrain_gpt_run(self):
        # 2 ranks (2 pipeline stages) by hand, every group, files; the report must account for every span.
        with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
            s.close()
            env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2",
                   "MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": os.path.join(tmp, "telemetry"),
                   "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks"}
            flags = ["--pipeline-model-parallel-size", "2", "--num-layers", "2", "--hidden-size", "32",
                     "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
                     "--global-batch-size", "8", "--train-iters", "4", "--log-interval", "1", "--otel-enabled",
                     "--otel-span-groups", "all"]
            ranks = [subprocess.Popen([os.environ["LENS_PRETRAIN_GPT"], *flags], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
            outputs = [r.communicate(timeout=180)[0] for r in ranks]
            self.assertEqual([r.returncode for r in ranks], [0, 0], outputs)
            result = lens("report", os.path.join(tmp, "telemetry"), "--json")
            self.assertEqual(result.returncode, 0, result.stderr)
            f = json.loads(result.stdout)
        self.assertEqual((f["run"]["world_size"], f["run"]["pipeline_parallel_size"]), (2, 2))
        self.assertEqual([(s["iteration"], s["ranks"]) for s in f["steps"]], [(i, 2) for i in (1, 2, 3, 4)])
        self.assertEqual([entry["iteration"] for entry in f["loss"]], [1, 2, 3, 4])
        counted = sum(s["count"] for s in f["spans"])
        self.assertEqual(counted, f["read"]["spans"])
        self.assertEqual((f["lost"]["spans_exported"], f["lost"]["spans_dropped"]), (counted, 0))
        self.assertEqual(f["read"]["problems"], [])


if __name__ == "__main__":
    unittest.main()
