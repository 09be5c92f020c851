"""`lens report` on runs written by a fixture with known answers, and on bad input: every figure exact, every
problem reported with file and line while the rest is still read, exit codes scripts can use."""

import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

LENS = os.environ.get("LENS_TOOL", "lens")
MS = 1_000_000


def attr(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def resource(rank, world=2, pid=None, pipeline=1, run_id="run-7", host=None, tensor=None):
    return {"attributes": [attr("service.name", "megatron-lm"), attr("nemo.run.id", run_id), attr("dl.rank", rank),
                           attr("process.pid", pid if pid is not None else 100 + rank),
                           attr("dl.world_size", world), attr("dl.pipeline_parallel.size", pipeline),
                           attr("dl.data_parallel.size", world // pipeline // (tensor or 1))]
            + ([attr("host.name", host)] if host else [])
            + ([attr("dl.tensor_parallel.size", tensor)] if tensor else [])}


_ids = iter(range(1, 1 << 62))


def span(name, start_ms, duration_ms, links=(), attrs=None, **attributes):
    """A span `duration_ms` long from `start_ms`; attributes from `attrs` (keys as they are) and keywords (_ for .)."""
    start = 1_700_000_000_000 * MS + round(start_ms * MS)
    out = {"traceId": "ab" * 16, "spanId": f"{next(_ids):016x}", "name": name, "kind": 1,
           "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + round(duration_ms * MS)),
           "attributes": [attr(k, v) for k, v in {**(attrs or {}),
                                                  **{k.replace("_", "."): v for k, v in attributes.items()}}.items()]}
    if links:
        out["links"] = [{"traceId": "ab" * 16, "spanId": link} for link in links]
    return out


def spans_line(rank, spans, **resource_args):
    return json.dumps({"resourceSpans": [{"resource": resource(rank, **resource_args),
                                          "scopeSpans": [{"scope": {"name": "lens"}, "spans": spans}]}]})


def metrics_line(rank, time_ms, points, pid=None, run_id="run-7"):
    metrics = []
    for name, value, reason in points:
        point = {"timeUnixNano": str(time_ms * MS), ("asDouble" if isinstance(value, float) else "asInt"):
                 value if isinstance(value, float) else str(value)}
        if reason:
            point["attributes"] = [attr("reason", reason)]
        kind = "gauge" if name.startswith("megatron.training") else "sum"
        metrics.append({"name": name, kind: {"dataPoints": [point]}})
    return json.dumps({"resourceMetrics": [{"resource": resource(rank, pid=pid, run_id=run_id),
                                            "scopeMetrics": [{"scope": {"name": "lens"}, "metrics": metrics}]}]})


# Step times (ms) per iteration and rank: rank 1 is slower in iterations 2 and 3.
STEPS = {1: {0: 100, 1: 110}, 2: {0: 100, 1: 150}, 3: {0: 90, 1: 200}, 4: {0: 120, 1: 100}}


def write_run(directory, gz=False, run_id="run-7"):
    run = os.path.join(directory, run_id)
    os.makedirs(run)
    for rank in (0, 1):
        lines = []
        for iteration, by_rank in STEPS.items():
            lines.append(spans_line(rank, [span("megatron.train_step", iteration * 1000, by_rank[rank],
                                                megatron_iteration=iteration, megatron_loss=6.0 - iteration / 2),
                                           span("megatron.forward_backward", iteration * 1000, by_rank[rank] - 10)],
                                    run_id=run_id))
        opener = gzip.open if gz else open
        suffix = ".gz" if gz and rank == 1 else ""
        with (opener if suffix else open)(os.path.join(run, f"rank{rank}.traces.jsonl{suffix}"), "wt") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(run, f"rank{rank}.metrics.jsonl"), "w") as f:
            f.write(metrics_line(rank, 1000, [("lens.spans.exported", 4, None), ("lens.spans.dropped", 1, "queue_full"),
                                              ("megatron.training.loss", 5.5, None)], run_id=run_id) + "\n")
            f.write(metrics_line(rank, 2000, [("lens.spans.exported", 8, None), ("lens.spans.dropped", 2, "queue_full"),
                                              ("megatron.training.loss", 4.25, None)], run_id=run_id) + "\n")
            # The rank's checkpoint worker: the same rank, another process, its own counters, written last.
            f.write(metrics_line(rank, 3000, [("lens.spans.exported", 3, None)], pid=900 + rank, run_id=run_id) + "\n")
    return run


# A pipeline run with known answers: P = 2 stages x D = 3 replicas (rank = stage * 3 + replica, Megatron's order),
# iterations 1-4 of M = 4 micro-batches each. In a step (ms from its start): forward-backward [0, 90] on stage 0 and
# [5, 95] on stage 1 (a replica's pipeline window: 95 ms); per micro-batch a forward of 5 ms (rank 4, the straggler:
# 10 ms) and a backward of 10 ms; two receive waits of 2 ms (stage 1's wrapped in pp.recv_forward.linked, linked to
# stage 0's send_forward); gradient-sync wait 12 ms (rank 4: 1 ms, it is waited for), optimizer 5 ms. The first step
# lasts 300 ms, the others 130. A checkpoint at iteration 2 (rank 0's save 30 ms, the others 20; rank 0's worker
# writes 50 ms), an evaluation after iteration 4 (40 ms, with micro-batches outside any step), and a step 5 cut short
# by shutdown on rank 0. Rank 0 also has two concurrent grad_sync.start buckets that overlap without nesting.
P, D, M = 2, 3, 4
SLOW = 4
RANKS = range(P * D)


def step_ms(iteration):
    return 300 if iteration == 1 else 130


def pipeline_spans():
    """Per rank, the lines of spans it writes (one a step, children before parents as lens writes them, except
    rank 1, whose step spans come first), and rank 0's worker's line."""
    by_rank = {rank: [] for rank in RANKS}
    sends = {}  # (replica, iteration, micro-batch) -> stage 0's send_forward span id
    for rank in sorted(RANKS):  # stage 0 first: its send ids are linked to by stage 1
        stage, replica = divmod(rank, D)
        for iteration in (1, 2, 3, 4):
            t0 = iteration * 1000
            off = 5 * stage
            spans = [span("megatron.forward_backward", t0 + off, 90, attrs={"megatron.num_microbatches": M})]
            t = t0 + off
            for micro in range(M):
                if micro < 2 and stage == 1:
                    recv = span("megatron.pp.recv_forward.linked", t, 2, links=[sends[replica, iteration, micro]])
                    spans += [span("megatron.p2p.recv_forward", t, 2), recv]
                    t += 2
                elif micro < 2:
                    spans.append(span("megatron.p2p.recv_backward", t, 2))
                    t += 2
                forward = 10 if rank == SLOW else 5
                spans.append(span("megatron.microbatch.forward", t, forward))
                t += forward
                if stage == 0 and micro < 2:  # in the forward's last millisecond: it ends as stage 1's receive does
                    send = span("megatron.p2p.send_forward", t - 1, 1)
                    sends[replica, iteration, micro] = send["spanId"]
                    spans.append(send)
                spans.append(span("megatron.microbatch.backward", t, 10))
                t += 10
            if rank == 0:  # two buckets in flight at once
                spans += [span("megatron.grad_sync.start", t0 + 50, 10), span("megatron.grad_sync.start", t0 + 55, 10)]
            spans.append(span("megatron.grad_sync.finish", t0 + 100, 1 if rank == SLOW else 12))
            spans.append(span("megatron.optimizer_step", t0 + 112, 5))
            step = span("megatron.train_step", t0, step_ms(iteration),
                        megatron_iteration=iteration, megatron_loss=6.0 - iteration / 2)
            by_rank[rank].append([step] + spans if rank == 1 else spans + [step])
        extra = [span("megatron.save_checkpoint", 2000 + 200, 30 if rank == 0 else 20, megatron_iteration=2),
                 span("megatron.microbatch.forward", 4000 + 300, 5), span("megatron.evaluate", 4000 + 300, 40)]
        if rank == 0:
            extra.append(span("megatron.train_step", 5000, 50, megatron_iteration=5,
                              attrs={"nemo.span.truncated": True}))
        by_rank[rank].append(extra)
    worker = [span("nvrx.checkpoint.save.write", 2000 + 240, 50)]
    return by_rank, worker


def write_pipeline_run(directory, collector=False):
    """lens's layout (a file per rank), or one gzip file as a Collector's file exporter writes it: every rank's
    resource in each line, integers as JSON numbers."""
    by_rank, worker = pipeline_spans()
    run = os.path.join(directory, "run-7")
    os.makedirs(run)
    res = dict(world=P * D, pipeline=P)
    if not collector:
        for rank, lines in by_rank.items():
            with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                f.write("".join(spans_line(rank, spans, **res) + "\n" for spans in lines))
                if rank == 0:
                    f.write(spans_line(0, worker, pid=900, **res) + "\n")
        return run
    with gzip.open(os.path.join(run, "otelcol-traces.jsonl.gz"), "wt") as f:
        for i in range(5):
            batch = [{"resource": resource(rank, **res), "scopeSpans": [{"spans": by_rank[rank][i]}]} for rank in RANKS]
            if i == 4:
                batch.append({"resource": resource(0, pid=900, **res), "scopeSpans": [{"spans": worker}]})
            text = json.dumps({"resourceSpans": batch})
            f.write(re.sub(r'"(intValue|startTimeUnixNano|endTimeUnixNano)": "(\d+)"', r'"\1": \2', text) + "\n")
    return run


class TempDirTest(unittest.TestCase):
    """A test with a temporary directory of its own, self.tmp."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()


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


class HelpTextTest(TempDirTest):
    def test_help_and_errors_name_real_variables_not_placeholders(self):
        # CONTRACT's P_ (the environment prefix) never reaches users as P_HANG_SIGNAL or P_CONTROL.
        texts = [lens("--help").stdout]
        for command in (["report"], ["convert"], ["ctl"], ["hang"], ["ctl", "status"], ["ctl", "span-groups"]):
            texts.append(lens(*command, "--help").stdout)
        texts.append(lens("hang", self.tmp.name).stderr)  # no snapshot
        texts.append(lens("hang", self.tmp.name, "--signal").stderr)  # no process record
        texts.append(lens("ctl", self.tmp.name, "status").stderr)  # no control.json
        for text in texts:
            self.assertNotRegex(text, r"\bP_[A-Z]", text)
        joined = "\n".join(texts)
        for variable in ("MEGATRON_OTEL_HANG_SIGNAL", "MEGATRON_OTEL_HANG_TIMEOUT", "MEGATRON_OTEL_CONTROL"):
            self.assertIn(variable, joined)


class LongRunTextTest(TempDirTest):
    def test_a_long_run_puts_its_summary_first_and_the_step_table_on_request(self):
        # 1,000 iterations: before, 1,000 table rows came before the summary.
        run = os.path.join(self.tmp.name, "run-7")
        os.makedirs(run)
        for rank in (0, 1):
            with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                for first in range(1, 1001, 100):
                    f.write(spans_line(rank, [span("megatron.train_step", i * 1000, 100 + (i == 700) * 50 * rank,
                                                   megatron_iteration=i) for i in range(first, first + 100)]) + "\n")
        text = lens("report", run).stdout.splitlines()
        self.assertLess(len(text), 60)
        self.assertIn("steps: 1000 iterations (1-1000), step time 100 ms", text[3])
        self.assertIn("slowest: iteration 700, 150 ms on rank 1", text[3])
        lost = next(i for i, t in enumerate(text) if t.startswith("lost:"))
        spans = text.index("spans, all ranks (ms)")
        self.assertLess(lost, spans)  # the summary before the tables
        self.assertEqual(text[-1], "step time per iteration: 1000 rows, shown with --steps A-B (or all in --json)")
        asked = lens("report", run, "--steps", "1-1000").stdout.splitlines()
        self.assertEqual(len([t for t in asked if re.match(r"\s+\d+\s+2\s", t)]), 1000)


class PipelineFiguresTest(TempDirTest):
    """Phases, bubble, stragglers, first iteration, checkpoints, evaluations: exact on the pipeline fixture, from
    lens's files and from a Collector's."""

    def figures(self, run, *extra):
        result = lens("report", run, "--json", *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def check(self, f):
        self.assertEqual((f["run"]["world_size"], f["run"]["pipeline_parallel_size"]), (6, 2))
        self.assertEqual([(s["iteration"], s["ranks"]) for s in f["steps"]], [(i, 6) for i in (1, 2, 3, 4)])
        step = (300 + 3 * 130) / 4
        phases = {r["rank"]: r for r in f["phases"]["per_rank"]}
        self.assertEqual(sorted(phases), list(RANKS))
        for rank, r in phases.items():
            forward, grad_sync = (40, 1) if rank == SLOW else (20, 12)
            want = {"forward_ms": forward, "backward_ms": 40, "pipeline_receive_wait_ms": 4,
                    "grad_sync_wait_ms": grad_sync, "optimizer_ms": 5, "step_ms": step, "steps": 4,
                    "other_ms": step - (forward + 40 + 4 + grad_sync + 5)}
            for key, value in want.items():
                self.assertAlmostEqual(r[key], value, places=6, msg=(rank, key))
        self.assertAlmostEqual(f["phases"]["mean_per_step"]["forward_ms"], (5 * 20 + 40) / 6, places=6)
        # The bubble: a replica's window is 95 ms; stage 0 computes 60 of it, stage 1's median rank too.
        self.assertEqual([(b["stage"], b["microbatches"], b["steps"]) for b in f["bubble"]], [(0, 4, 12), (1, 4, 12)])
        for b in f["bubble"]:
            self.assertAlmostEqual(b["measured"], 35 / 95, places=6)
            self.assertAlmostEqual(b["theoretical"], (P - 1) / (M + P - 1), places=9)
        stragglers = {r["rank"]: r for r in f["stragglers"]["ranks"]}
        self.assertEqual([r["rank"] for r in f["stragglers"]["named"]], [SLOW])
        self.assertEqual((stragglers[SLOW]["steps_flagged"], stragglers[SLOW]["steps_scored"]), (4, 4))
        self.assertEqual([stragglers[r]["steps_flagged"] for r in RANKS if r != SLOW], [0] * 5)
        self.assertAlmostEqual(stragglers[SLOW]["compute_ms_median"], 80, places=6)
        self.assertAlmostEqual(stragglers[SLOW]["stage_compute_ms_median"], 60, places=6)
        self.assertAlmostEqual(stragglers[SLOW]["wait_ms_median"], 5, places=6)
        self.assertAlmostEqual(stragglers[SLOW]["stage_wait_ms_median"], 16, places=6)
        self.assertEqual(f["first_iteration"], {"iteration": 1, "step_ms": 300, "later_median_ms": 130,
                                                "overhead_ms": 170})
        self.assertEqual(f["checkpoints"], [{"iteration": 2, "ranks": 6, "save_ms_max": 30,
                                             "async_write_ms_max": 50}])
        self.assertEqual(f["evaluations"], [{"after_iteration": 4, "ranks": 6, "max_ms": 40}])
        self.assertEqual(f["lost"]["spans_truncated"], 1)  # rank 0's step 5: left out of the step table
        self.assertEqual(f["read"]["problems"], [])

    def test_lens_files(self):
        self.check(self.figures(write_pipeline_run(self.tmp.name)))

    def test_a_collector_file_exporter_file(self):
        self.check(self.figures(write_pipeline_run(self.tmp.name, collector=True)))

    def test_one_directory_per_node_is_one_run(self):
        """Each node writes its ranks' files on its own disk: the directories together give the figures of one."""
        run = write_pipeline_run(self.tmp.name)
        nodes = [os.path.join(self.tmp.name, f"node{n}", "telemetry", "run-7") for n in (0, 1)]
        for n, node in enumerate(nodes):
            os.makedirs(node)
            for rank in RANKS:
                if rank // (len(RANKS) // 2) == n:
                    shutil.copy(os.path.join(run, f"rank{rank}.traces.jsonl"), node)
        together = self.figures(*nodes)
        self.check(together)
        whole = self.figures(run)
        self.assertEqual({**together, "read": None}, {**whole, "read": None})
        self.assertEqual(together["read"]["files"], whole["read"]["files"])
        self.assertEqual(self.figures(run, *nodes, run)["read"]["files"], 2 * whole["read"]["files"],
                         "a file under two inputs is read once: here the copies are other files")

    def test_a_collectors_rotated_files_plain_jsonl_and_gzip(self):
        """The file exporter's rotation leaves name-<time>.json backups beside the current file; a person may
        gzip the old ones."""
        run = write_pipeline_run(self.tmp.name, collector=True)
        with gzip.open(os.path.join(run, "otelcol-traces.jsonl.gz"), "rt") as f:
            lines = f.readlines()
        os.remove(os.path.join(run, "otelcol-traces.jsonl.gz"))
        parts = {"traces-2026-12-01T10-00-00.000.json": lines[:2], "traces-2026-12-01T11-00-00.000.json.gz": lines[2:4],
                 "traces.jsonl": lines[4:]}
        for name, part in parts.items():
            with (gzip.open if name.endswith(".gz") else open)(os.path.join(run, name), "wt") as f:
                f.writelines(part)
        self.check(self.figures(run))
        self.check(self.figures(*[os.path.join(run, name) for name in parts]))

    def test_the_text_form_names_the_straggler_and_the_bubble(self):
        result = lens("report", write_pipeline_run(self.tmp.name))
        self.assertIn("straggler: rank 4 (stage 1), flagged in 4 of 4 steps: computes 1.33x its peers' (80.00 ms vs "
                      "60.00), waits 5.00 ms vs 16.00", result.stdout)
        self.assertIn("stage 1: 36.8% measured, 20.0% theoretical (4 micro-batches)", result.stdout)
        self.assertIn("first iteration (1): 300 ms, 170 ms more", result.stdout)
        self.assertIn("checkpoint at iteration 2: save 30.00 ms (slowest of 6 ranks), async write 50.00 ms",
                      result.stdout)

    def test_steps_limit_every_per_step_figure_and_the_first_iteration_goes(self):
        f = self.figures(write_pipeline_run(self.tmp.name), "--steps", "2-3")
        self.assertEqual([s["iteration"] for s in f["steps"]], [2, 3])
        self.assertEqual({r["steps"] for r in f["phases"]["per_rank"]}, {2})
        self.assertEqual(f["stragglers"]["ranks"], [])  # 2 steps: fewer than a window needs to be scored
        self.assertIsNone(f["first_iteration"])

    def test_fail_if(self):
        run = write_pipeline_run(self.tmp.name)
        for condition, status in (("straggler", 1), ("bubble>30", 1), ("bubble>40", 0), ("bubble-excess>15", 1),
                                  ("bubble-excess>20", 0), ("dropped>0", 0), ("problems", 0)):
            with self.subTest(condition=condition):
                result = lens("report", run, "--fail-if", condition)
                self.assertEqual(result.returncode, status, result.stderr)
                if status:
                    self.assertIn(f"--fail-if {condition}:", result.stderr)
        # repeatable, and a RUN_DIR after it is still the RUN_DIR
        self.assertEqual(lens("report", "--fail-if", "bubble>90", "--fail-if", "straggler", run).returncode, 1)
        for bad in ("bubble", "bubble>x", "speed>3", "straggler>1"):
            with self.subTest(bad=bad):
                result = lens("report", run, "--fail-if", bad)
                self.assertEqual(result.returncode, 2)
                self.assertIn("--fail-if", result.stderr)


HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.environ.get("LENS_TEST_PEERS", os.path.join(HERE, "..", "..", "tests", "peers"))
ARTIFACTS = os.environ.get("LENS_TEST_ARTIFACTS", tempfile.gettempdir())


def check_chrome_trace(path):
    """The node checker's verdict on a Chrome trace: strict nesting per track, both ends of every flow, names,
    categories, and the DevTools trace engine's own binding of every flow, forward in time."""
    result = subprocess.run(["node", os.path.join(HERE, "check_chrome_trace.js"), path, PEERS], capture_output=True,
                            text=True, timeout=120)
    summary = json.loads(result.stdout)
    return result.returncode, summary


def open_page(path, screenshot):
    """What headless chromium shows of an HTML report opened from disk."""
    result = subprocess.run(["node", os.path.join(HERE, "check_html_page.js"), path, screenshot, PEERS],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)


def cells_match(test, row, want):
    """A table row's text against figures: numbers to the page's two decimals, no figure as "-", the rest as text."""
    test.assertEqual(len(row), len(want))
    for text, value in zip(row, want):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            test.assertAlmostEqual(float(text), value, delta=0.005 + 1e-9, msg=(row, want))
        elif value is None:
            test.assertEqual(text, "-", (row, want))
        else:
            test.assertEqual(text, str(value))


PHASES = ["forward", "backward", "pipeline_receive_wait", "grad_sync_wait", "tensor_parallel_wait", "optimizer"]


def check_page_against_figures(test, page, f):
    test.assertEqual(page["errors"], [])
    test.assertEqual(page["requests"], [])  # nothing fetched: the page is all in its file
    test.assertEqual(sorted(page["rank_lanes"]), sorted(f["run"]["ranks"]))
    phase_keys = ["steps", "step_ms"] + [phase + "_ms" for phase in PHASES] + ["other_ms"]
    device = any(v is not None for v in f["phases"]["mean_per_step"]["device_ms"].values())

    def cells(r):  # with device time: each phase's device time and launch overhead after the host's
        device_cells = [r[kind][phase] for phase in PHASES for kind in ("device_ms", "launch_overhead_ms")]
        return [r[k] for k in phase_keys] + (device_cells if device else [])
    rows = [[r["rank"]] + cells(r) for r in f["phases"]["per_rank"]]
    rows.append(["all"] + cells(f["phases"]["mean_per_step"]))
    test.assertEqual(len(page["phases"]), len(rows))
    for got, want in zip(page["phases"], rows):
        cells_match(test, got, want)
    straggler_keys = ["rank", "stage", "steps_scored", "steps_flagged", "share", "score", "compute_ms_median",
                      "stage_compute_ms_median", "wait_ms_median", "stage_wait_ms_median"]
    test.assertEqual(len(page["stragglers"]), len(f["stragglers"]["ranks"]))
    for got, want in zip(page["stragglers"], f["stragglers"]["ranks"]):
        cells_match(test, got, [want[k] for k in straggler_keys])
    for got, want in zip(page["bubble"], f["bubble"]):
        cells_match(test, got, [want["stage"], want["microbatches"], 100 * want["measured"], 100 * want["theoretical"]])
    test.assertEqual(page["loss_points"], len(f["loss"]))
    test.assertEqual(len(page["compute_series"]), len(f["run"]["ranks"]))
    check_exploring(test, page["explored"])


def check_exploring(test, explored):
    """Two clicks on "Zoom in" show the middle quarter, with ticks in it; a click on a span shows its name, duration
    and every attribute the page holds for it; the wheel zooms out around the pointer."""
    (first, last), (zoomed_first, zoomed_last) = explored["before"], explored["zoomed"]
    test.assertEqual(first, 0)
    test.assertAlmostEqual(zoomed_last - zoomed_first, (last - first) / 4, delta=1e-6 * last)
    test.assertAlmostEqual((zoomed_first + zoomed_last) / 2, (first + last) / 2, delta=1e-6 * last)
    ticks = [float(t.split()[0]) for t in explored["ticks"]]
    test.assertGreaterEqual(len(ticks), 3)
    test.assertTrue(all(zoomed_first - 1e-9 <= t <= zoomed_last + 1e-9 for t in ticks), (ticks, explored["zoomed"]))
    test.assertIsNotNone(explored["target"], "no span to click in view")
    rows = dict((k, v) for k, v in explored["details"])
    clicked = explored["clicked"]
    test.assertEqual(rows["name"], clicked["name"])
    test.assertEqual(explored["target"]["title"], f'{clicked["name"]} {clicked["duration_ms"]:.3f} ms')
    test.assertEqual(rows["duration"], f'{clicked["duration_ms"]:.3f} ms')
    test.assertTrue(clicked["attributes"])
    for key in clicked["attributes"]:
        test.assertIn(key, rows)
    wheeled_first, wheeled_last = explored["wheeled"]
    test.assertGreater(wheeled_last - wheeled_first, zoomed_last - zoomed_first)


# Tensor parallel 2 x data parallel 2 (rank = replica * 2 + tensor-parallel rank), 6 steps of 100 ms, one micro-batch:
# a forward of 10 ms with a forward all-reduce of 3 ms in it, a backward of 20 ms with a backward all-reduce of 4 ms,
# then the gradient sync and a 5 ms optimizer. Rank 1 computes 20 ms more in forward; its tensor-parallel partner,
# rank 0, waits those 20 ms in the forward all-reduce, and rank 1's replica, rank 3, in the gradient sync (as rank 2
# does for rank 0, which finished late).
def tensor_parallel_spans(rank):
    forward = 30 if rank in (0, 1) else 10
    forward_wait = 23 if rank == 0 else 3
    sync = 2 if rank in (0, 1) else 22
    lines = []
    for iteration in range(1, 7):
        t0 = iteration * 1000
        lines.append([
            span("megatron.tp.all_reduce", t0 + forward - forward_wait, forward_wait,
                 attrs={"megatron.tp.region": "reduce_from_tensor_model_parallel_region",
                        "megatron.tp.pass": "forward"}),
            span("megatron.microbatch.forward", t0, forward),
            span("megatron.tp.all_reduce", t0 + forward + 10, 4,
                 attrs={"megatron.tp.region": "copy_to_tensor_model_parallel_region", "megatron.tp.pass": "backward"}),
            span("megatron.microbatch.backward", t0 + forward, 20),
            span("megatron.grad_sync.finish", t0 + forward + 20, sync),
            span("megatron.optimizer_step", t0 + forward + 20 + sync, 5),
            span("megatron.train_step", t0, 100, megatron_iteration=iteration)])
    return lines


class TensorParallelFiguresTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.run = os.path.join(self.tmp.name, "run-7")
        os.makedirs(self.run)
        for rank in range(4):
            with open(os.path.join(self.run, f"rank{rank}.traces.jsonl"), "w") as f:
                f.write("".join(spans_line(rank, spans, world=4, tensor=2) + "\n"
                                for spans in tensor_parallel_spans(rank)))
        self.figures = json.loads(lens("report", self.run, "--json").stdout)

    def test_the_all_reduce_wait_is_a_phase_of_its_own_taken_out_of_the_pass_it_ran_in(self):
        f = self.figures
        self.assertEqual((f["run"]["tensor_parallel_size"], f["run"]["data_parallel_size"]), (2, 2))
        waiter = f["phases"]["per_rank"][0]
        self.assertEqual((waiter["forward_ms"], waiter["backward_ms"], waiter["tensor_parallel_wait_ms"],
                          waiter["grad_sync_wait_ms"], waiter["optimizer_ms"], waiter["other_ms"]),
                         (7, 16, 27, 2, 5, 43))
        text = lens("report", self.run).stdout
        self.assertIn("(tensor 2 x pipeline 1 x data 2)", text)
        self.assertIn("tensor_parallel_wait 12.00", text)  # (27 + 7 + 7 + 7) / 4

    def test_a_rank_is_compared_with_its_stage_at_its_tensor_parallel_position(self):
        # Rank 0 computes no longer than its replica (rank 2): its extra time is the all-reduce wait. Rank 1, whose
        # replica is rank 3, is the straggler.
        s = self.figures["stragglers"]
        self.assertEqual([r["rank"] for r in s["named"]], [1])
        by_rank = {r["rank"]: r for r in s["ranks"]}
        self.assertEqual((by_rank[1]["compute_ms_median"], by_rank[1]["stage_compute_ms_median"]), (43, 23))
        self.assertEqual((by_rank[0]["compute_ms_median"], by_rank[0]["stage_compute_ms_median"]), (23, 23))


class PicturesTest(unittest.TestCase):
    """The HTML page in a real browser and the Chrome JSON through a checker, on the pipeline fixture."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = write_pipeline_run(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_the_html_page_shows_the_figures_of_json(self):
        page_path = os.path.join(self.tmp.name, "report.html")
        result = lens("report", self.run, "--html", page_path)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"wrote {page_path}", result.stderr)
        f = json.loads(lens("report", self.run, "--json").stdout)
        page = open_page(page_path, os.path.join(ARTIFACTS, "lens_report_fixture.png"))
        check_page_against_figures(self, page, f)
        self.assertEqual(page["verdict"], "Stragglers named: rank 4")
        self.assertEqual(page["links_drawn"], 2 * 2 * 3)  # the last two iterations, 2 links a stage-1 rank each
        self.assertEqual(page["links_backwards"], 0)  # each receive began before its send: drawn to its arrival
        with open(page_path) as html:
            text = html.read()
        self.assertNotRegex(text, r"(src|href)=")  # no script, image or style sheet from elsewhere

    def test_chrome_json_nests_strictly_and_flows_have_both_ends(self):
        for name in ("trace.json", "trace.json.gz"):
            with self.subTest(output=name):
                path = os.path.join(self.tmp.name, name)
                result = lens("convert", self.run, "--to", "chrome-json", "-o", path)
                self.assertEqual(result.returncode, 0, result.stderr)
                status, summary = check_chrome_trace(path)
                self.assertEqual((status, summary["problems"]), (0, []))
                names = {(p["rank"], p["pp"], p["dp"]) for p in summary["processes"]}
                self.assertEqual(names, {(r, r // D, r % D) for r in RANKS})
                self.assertEqual(len(summary["processes"]), 7)  # and rank 0's checkpoint worker, with its pid
                self.assertEqual(summary["flows"], 4 * 2 * 3)
                # the DevTools trace engine binds every one, forward in time (it bound none before events had a
                # category, and a flow bound at the receive's start ran backwards)
                self.assertEqual((summary["devtools_bound_flows"], summary["backwards_flows"]), (4 * 2 * 3, 0))
                # rank 0's overlapping buckets are on a lane of their own: more tracks than processes
                self.assertGreater(summary["tracks"], 7)
        with gzip.open(os.path.join(self.tmp.name, "trace.json.gz"), "rt") as f:
            events = json.load(f)["traceEvents"]
        steps = [e for e in events if e["ph"] == "X" and e["name"] == "megatron.train_step"]
        self.assertTrue(all("megatron.iteration" in e["args"] and "span_id" in e["args"] for e in steps))
        named = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
        self.assertIn("dl.rank", named[0]["args"])  # the resource rides the process

    def test_convert_steps(self):
        path = os.path.join(self.tmp.name, "trace.json")
        result = lens("convert", self.run, "--to", "chrome-json", "-o", path, "--steps", "2-3")
        self.assertEqual(result.returncode, 0, result.stderr)
        status, summary = check_chrome_trace(path)
        self.assertEqual((status, summary["flows"], len(summary["processes"])), (0, 2 * 2 * 3, 6))
        self.assertEqual(lens("convert", self.run, "--to", "chrome-json", "-o", path, "--steps", "50").returncode, 2)
        self.assertEqual(lens("convert", self.run, "--to", "svg", "-o", path).returncode, 2)
        result = lens("convert", self.run, "--to", "chrome-json", "-o", os.path.join(self.tmp.name, "no", "such.json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("cannot write", result.stderr)


class ResumedRunTest(unittest.TestCase):
    def test_two_launches_in_one_run_id_make_one_step_table(self):
        # A run resumed from a checkpoint: each rank is a second process (another pid) for iterations 3 and 4,
        # appending to the same files.
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run-7")
            os.makedirs(run)
            for rank in (0, 1):
                with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                    for iteration, by_rank in STEPS.items():
                        pid = (100 if iteration <= 2 else 200) + rank
                        step = span("megatron.train_step", iteration * 1000, by_rank[rank],
                                    megatron_iteration=iteration)
                        f.write(spans_line(rank, [step], pid=pid) + "\n")
            f = json.loads(lens("report", run, "--json").stdout)
            self.assertEqual([(s["iteration"], s["ranks"]) for s in f["steps"]], [(i, 2) for i in (1, 2, 3, 4)])
            self.assertEqual(f["steps"][2]["max_ms"], 200)
            trace = os.path.join(tmp, "trace.json")
            self.assertEqual(lens("convert", run, "--to", "chrome-json", "-o", trace).returncode, 0)
            status, summary = check_chrome_trace(trace)
            self.assertEqual((status, len(summary["processes"])), (0, 4))
            self.assertTrue(all(p["second"] for p in summary["processes"]))  # each named with its pid


class GoodputTest(TempDirTest):
    """Goodput over a run that failed and was relaunched: the second process redoes iteration 5 (the first one's last
    checkpoint was at 4), so that step of the first process is lost, and so is the time between the two."""

    def write_restarted_run(self):
        run = os.path.join(self.tmp.name, "run-7")
        os.makedirs(run)
        first = [span("megatron.model_init", 0, 1000)]
        first += [span("megatron.train_step", 1000 * i, 800, megatron_iteration=i) for i in range(1, 6)]
        first.append(span("megatron.save_checkpoint", 4800, 200, megatron_iteration=4))
        second = [span("megatron.model_init", 8000, 1000), span("megatron.load_checkpoint", 9000, 500)]
        second += [span("megatron.train_step", 1000 * (i + 5), 800, megatron_iteration=i) for i in range(5, 9)]
        second.append(span("megatron.evaluate", 13800, 500))
        second.append(span("nvrx.checkpoint.save.write", 14000, 5000))  # a worker's: not the job's time
        with open(os.path.join(run, "rank0.traces.jsonl"), "w") as f:
            f.write(spans_line(0, first, world=1, pid=100) + "\n")
            f.write(spans_line(0, second, world=1, pid=200) + "\n")
        return run

    def test_goodput_is_the_steps_that_count_and_the_rest_is_said(self):
        f = json.loads(lens("report", self.write_restarted_run(), "--json").stdout)["goodput"]
        want = {"rank": 0, "attempts": 2, "wall_s": 14.3, "goodput_s": 6.4, "startup_s": 3.0, "checkpoint_s": 0.2,
                "evaluation_s": 0.5, "restarts_s": 2.2, "redone_s": 0.8, "redone_iterations": 1, "other_s": 1.2}
        for key, value in want.items():
            self.assertAlmostEqual(f[key], value, places=6, msg=key)
        self.assertAlmostEqual(f["share"], 6.4 / 14.3, places=6)
        text = lens("report", os.path.join(self.tmp.name, "run-7")).stdout
        self.assertIn("goodput: 44.8% of 14.3 s wall in steps that count (rank 0, 2 processes); the rest: startup "
                      "3.0 s, checkpoints 0.2 s, evaluation 0.5 s, restarts 2.2 s, 1 iterations redone 0.8 s, "
                      "other 1.2 s", text)

    def test_without_step_spans_goodput_is_not_measured(self):
        run = os.path.join(self.tmp.name, "run-7")
        os.makedirs(run)
        with open(os.path.join(run, "rank0.traces.jsonl"), "w") as f:
            f.write(spans_line(0, [span("megatron.model_init", 0, 1000)], world=1) + "\n")
        f = json.loads(lens("report", run, "--json").stdout)["goodput"]
        self.assertIn("span group `step` off", f["not_measured"])


class TwoRunsTest(TempDirTest):
    """Two runs' spans are never mixed into one figure (before: one report of both, steps of 4 ranks out of 2)."""

    def test_a_directory_of_two_runs_is_refused_until_one_is_named(self):
        write_run(self.tmp.name, run_id="run-7")
        write_run(self.tmp.name, run_id="run-8")
        for args in (("report",), ("convert", "--to", "chrome-json", "-o", os.path.join(self.tmp.name, "t.json"))):
            with self.subTest(tool=args[0]):
                result = lens(*args[:1], self.tmp.name, *args[1:])
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("2 runs under", result.stderr)
                self.assertIn("run-7, run-8", result.stderr)
                self.assertIn("--run ID", result.stderr)
                self.assertEqual(result.stdout, "")
                self.assertEqual(lens(*args[:1], self.tmp.name, *args[1:], "--run", "run-8").returncode, 0)
        f = json.loads(lens("report", self.tmp.name, "--run", "run-8", "--json").stdout)
        self.assertEqual(f["run"]["run_ids"], ["run-8"])
        self.assertEqual([(s["iteration"], s["ranks"]) for s in f["steps"]], [(i, 2) for i in (1, 2, 3, 4)])
        self.assertEqual(f["lost"]["spans_exported"], 2 * (8 + 3))  # run 8's counters only
        unknown = lens("report", self.tmp.name, "--run", "run-9")
        self.assertEqual(unknown.returncode, 2)
        self.assertIn("no run run-9", unknown.stderr)

    def test_two_runs_in_two_directories_are_refused_naming_both(self):
        first, second = (write_run(os.path.join(self.tmp.name, node), run_id=run_id)
                         for node, run_id in (("node0", "run-7"), ("node1", "run-8")))
        result = lens("report", first, second)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(f"2 runs under {first} and {second} (run-7, run-8)", result.stderr)
        self.assertEqual(result.stdout, "")

    def test_one_file_of_two_runs_is_read_one_run_at_a_time(self):
        # A Collector's file exporter writes every run it receives into one file.
        for run_id in ("run-7", "run-8"):
            write_run(self.tmp.name, run_id=run_id)
        both = os.path.join(self.tmp.name, "collector.jsonl")
        with open(both, "w") as out:
            for run_id in ("run-7", "run-8"):
                for rank in (0, 1):
                    with open(os.path.join(self.tmp.name, run_id, f"rank{rank}.traces.jsonl")) as f:
                        out.write(f.read())
        self.assertEqual(lens("report", both).returncode, 2)
        f = json.loads(lens("report", both, "--run", "run-7", "--json").stdout)
        self.assertEqual((f["run"]["run_ids"], f["read"]["spans"]), (["run-7"], 2 * 2 * len(STEPS)))


class BadInputTest(TempDirTest):
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


GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "report")


def write_group_change_run(directory):
    """write_run's run with two lens ctl changes (one for 2 iterations, then its restore) on spans of their own."""
    run = write_run(directory)
    changes = []
    for rank in (0, 1):
        for iteration, groups, extra in ((2, "job,per_step", {"lens.span_groups.for": 2}),
                                         (4, "job", {"lens.span_groups.restored": True})):
            marked = span("megatron.layer.forward", iteration * 1000 + 1, 1, megatron_iteration=iteration)
            marked["events"] = [{"name": "lens.span_groups.changed", "timeUnixNano": marked["startTimeUnixNano"],
                                 "attributes": [attr(k, v) for k, v in {"lens.span_groups": groups, **extra}.items()]}]
            changes.append(spans_line(rank, [marked]))
    with open(os.path.join(run, "rank0.traces.jsonl"), "a") as f:
        f.write("\n".join(changes) + "\n")
    return run


class DeviceTimeTest(TempDirTest):
    """Device spans (`<name>.device`, docs/GPU.md) beside their host spans, with known answers. One rank,
    two 100 ms steps; in each a forward of 10 ms on the host whose device span runs 30 ms from 5 ms after it (the GPU
    behind the host), and a receive wait of 8 ms on the host, 2 ms on the device, whose device span starts inside the
    step and ends after it. Device spans count in no host phase, and each in the step it starts in."""

    def write(self):
        run = os.path.join(self.tmp.name, "run-dev")
        os.makedirs(run)
        lines = []
        for iteration in (1, 2):
            t = iteration * 1000
            lines.append(spans_line(0, [
                span("megatron.microbatch.forward", t + 10, 10),
                span("megatron.microbatch.forward.device", t + 15, 30, lens_device="cuda:0"),
                span("megatron.p2p.recv_forward", t + 80, 8),
                span("megatron.p2p.recv_forward.device", t + 99, 2, lens_device="cuda:0"),
                span("megatron.train_step", t, 100, megatron_iteration=iteration)], world=1))
        with open(os.path.join(run, "rank0.traces.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return run

    def test_device_time_is_beside_host_time_by_name_and_phase_with_the_launch_overhead(self):
        run = self.write()
        result = lens("report", run, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        f = json.loads(result.stdout)
        by_name = {s["name"]: s for s in f["spans"]}
        self.assertNotIn("megatron.microbatch.forward.device", by_name)  # beside its host span, not a name of its own
        forward = by_name["megatron.microbatch.forward"]
        self.assertEqual((forward["count"], forward["mean_ms"]), (2, 10))
        self.assertEqual((forward["device"]["count"], forward["device"]["p50_ms"], forward["device"]["mean_ms"]),
                         (2, 30, 30))
        self.assertEqual(forward["launch_overhead_ms"], -20)  # the GPU took 20 ms longer than the launch
        self.assertIsNone(by_name["megatron.train_step"]["device"])
        self.assertIsNone(by_name["megatron.train_step"]["launch_overhead_ms"])
        mean = f["phases"]["mean_per_step"]
        self.assertEqual((mean["forward_ms"], mean["pipeline_receive_wait_ms"]), (10, 8))  # the host's alone
        self.assertEqual(mean["device_ms"], {"forward": 30, "backward": None, "pipeline_receive_wait": 2,
                                             "grad_sync_wait": None, "tensor_parallel_wait": None, "optimizer": None})
        self.assertEqual((mean["launch_overhead_ms"]["forward"], mean["launch_overhead_ms"]["pipeline_receive_wait"]),
                         (-20, 6))
        self.assertEqual(mean["other_ms"], 82)  # 100 - 10 - 8: device time is not taken from the host's step
        text = lens("report", run).stdout
        self.assertIn("launch overhead (host - device): forward -20.00", text)
        self.assertRegex(text, r"megatron.microbatch.forward\s+2\s+30.00\s+30.00\s+10.00\s+30.00\s+-20.00")


class GoldenOutputTest(TempDirTest):
    """`lens report`'s JSON and text for fixed runs, byte for byte as testdata/report/ holds them.
    LENS_UPDATE_GOLDEN=1 rewrites them: only for a change meant to
    change the output, said in its commit."""

    CASES = {
        "simple": (write_run, ()),
        "simple_steps": (write_run, ("--steps", "2-3")),
        "pipeline": (write_pipeline_run, ()),
        "pipeline_steps": (write_pipeline_run, ("--steps", "2-3")),
        "group_changes": (write_group_change_run, ()),
    }

    def check(self, name, form, output):
        path = os.path.join(GOLDEN, f"{name}.{form}")
        if os.environ.get("LENS_UPDATE_GOLDEN") == "1":
            with open(path, "w", encoding="utf-8") as f:
                f.write(output)
        with open(path, encoding="utf-8") as f:
            self.assertEqual(output, f.read(), f"{name} {form}: differs from {path}")

    def test_json_and_text_are_as_before(self):
        for name, (write, extra) in self.CASES.items():
            with self.subTest(case=name), tempfile.TemporaryDirectory() as tmp:
                run = write(tmp)
                for form, flags in (("json", ("--json",)), ("txt", ())):
                    result = lens("report", run, *flags, *extra)
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.check(name, form, result.stdout)

    def test_every_number_of_threads_gives_the_same_output(self):
        # With several files each thread reads a run of them into a report of its own, merged after.
        for name, (write, extra) in self.CASES.items():
            with tempfile.TemporaryDirectory() as tmp:
                run = write(tmp)
                for threads in ("1", "2", "3", "8"):
                    with self.subTest(case=name, threads=threads):
                        result = lens("report", run, "--json", "--threads", threads, *extra)
                        self.assertEqual(result.returncode, 0, result.stderr)
                        self.check(name, "json", result.stdout)


class ThreadsTest(TempDirTest):
    """Files read by several threads, each into a report of its own, give the one report's figures, also
    when a process's spans are cut between files that two threads read (a step span in one, its children in the
    file before), as a Collector's rotated files cut them."""

    def cut_into_files(self, run, parts):
        lines = []
        for path in sorted(glob.glob(os.path.join(run, "*.jsonl"))):
            with open(path) as f:
                for line in f:
                    # A line a span, so that a cut can fall between any two spans of a process.
                    batch = json.loads(line)
                    for rs in batch["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            for one in ss["spans"]:
                                lines.append(json.dumps({"resourceSpans": [
                                    {"resource": rs["resource"], "scopeSpans": [{"spans": [one]}]}]}))
            os.remove(path)
        size = -(-len(lines) // parts)
        for i in range(parts):  # otelcol-0.json, otelcol-1.json, ...: read in this order
            with open(os.path.join(run, f"otelcol-{i}.json"), "w") as f:
                f.write("".join(line + "\n" for line in lines[i * size:(i + 1) * size]))

    def test_a_process_cut_between_threads_gives_the_same_figures(self):
        run = write_pipeline_run(self.tmp.name)
        self.cut_into_files(run, 5)
        one = lens("report", run, "--json", "--threads", "1")
        self.assertEqual(one.returncode, 0, one.stderr)
        figures = json.loads(one.stdout)
        self.assertEqual(figures["read"]["files"], 5)
        self.assertEqual([s["ranks"] for s in figures["steps"]][:4], [P * D] * 4)
        for threads in ("2", "3", "5", "8"):
            with self.subTest(threads=threads):
                result = lens("report", run, "--json", "--threads", threads)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, one.stdout)

    def test_one_large_file_read_in_parts_gives_the_same_figures_and_lines(self):
        # A Collector's one plain file is cut into parts at line starts, a part a thread (at least 1 MiB each): the
        # same figures, and a bad line is said at its line of the file whichever part held it.
        run = write_pipeline_run(self.tmp.name)
        self.cut_into_files(run, 1)
        path = os.path.join(run, "otelcol-0.json")
        with open(path) as f:
            lines = f.read().splitlines()
        bad_at = [2, len(lines) // 2, len(lines) - 3]  # 0-based, in the lines as they will be written
        for at in bad_at:
            lines.insert(at, '{"resourceSpans": [ cut short')
        pad = " " * (6 * 1024 * 1024 // len(lines))  # JSON's whitespace: 6 MiB in all, so up to 6 parts
        with open(path, "w") as f:
            f.write("".join(line + pad + "\n" for line in lines))
        figures = self.same_at_every_number_of_threads(run, threads=("2", "3", "6"))
        self.assertEqual(figures["read"]["files"], 1)
        self.assertEqual([(p["file"], p["line"]) for p in figures["read"]["problems"]],
                         [(path, at + 1) for at in bad_at])
        self.assertEqual([s["ranks"] for s in figures["steps"]][:4], [P * D] * 4)

    def same_at_every_number_of_threads(self, run, threads=("2", "3", "5")):
        one = lens("report", run, "--json", "--threads", "1")
        self.assertEqual(one.returncode, 0, one.stderr)
        for n in threads:
            with self.subTest(threads=n):
                result = lens("report", run, "--json", "--threads", n)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, one.stdout)
        return json.loads(one.stdout)

    def test_hosts_clocks_put_together_from_threads_are_one_reports(self):
        # Stage 0 on node0, stage 1 on node1, whose clock is 10 ms behind: its linked receives end before the sends
        # they link to begin. The sends and the receives fall to different threads' files.
        by_rank, _ = pipeline_spans()
        run = os.path.join(self.tmp.name, "run")
        os.makedirs(run)
        for rank, lines in by_rank.items():
            stage = rank // D
            with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                for spans in lines:
                    for one in spans:
                        for key in ("startTimeUnixNano", "endTimeUnixNano"):
                            one[key] = str(int(one[key]) - 10 * MS * stage)
                    f.write(spans_line(rank, spans, world=P * D, pipeline=P, host=f"node{stage}") + "\n")
        self.cut_into_files(run, 5)
        clocks = self.same_at_every_number_of_threads(run)["clocks"]
        self.assertEqual(clocks["reference_host"], "node0")
        node1 = {h["host"]: h for h in clocks["hosts"]}["node1"]
        self.assertEqual(node1["links"], D * 2 * 4)  # each replica's two warm-up receives in each of 4 iterations
        self.assertGreaterEqual(node1["at_least_ms"], 7)  # a receive ends 2 ms after its send's start, less 10 ms
        self.assertTrue(clocks["corrected"])

    def test_durations_past_the_exact_values_are_merged_as_one_report_adds_them(self):
        # More durations of one name than a report keeps exactly (65,536) in each of two files: each thread's
        # report holds them in buckets, and the merged percentiles are those of one report.
        run = os.path.join(self.tmp.name, "run")
        os.makedirs(run)
        for rank in (0, 1):
            spans = [span("megatron.microbatch.forward", i, 0.5 + ((i * 7919 + rank) % 9973) / 97)
                     for i in range(70_000)]
            with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                f.write("".join(spans_line(rank, spans[k:k + 1024]) + "\n" for k in range(0, len(spans), 1024)))
        figures = self.same_at_every_number_of_threads(run, threads=("2",))
        forward = {s["name"]: s for s in figures["spans"]}["megatron.microbatch.forward"]
        self.assertEqual(forward["count"], 140_000)

    def test_names_past_the_limit_are_those_of_one_report(self):
        # The first file fills most of the 10,000 names; the second file's own names overflow while it still has
        # spans of a name the first one kept: that name's count must stay whole.
        run = os.path.join(self.tmp.name, "run")
        os.makedirs(run)
        for rank, names in ((0, [f"a.{i}" for i in range(8000)] + [f"c.{i}" for i in range(3000)]),
                            (1, [f"c.{i}" for i in range(3000)] + [f"b.{i}" for i in range(8000)] + ["a.5"] * 10)):
            spans = [span(name, 1000 + i, 0.1 + i % 7) for i, name in enumerate(names)]
            with open(os.path.join(run, f"rank{rank}.traces.jsonl"), "w") as f:
                f.write("".join(spans_line(rank, spans[k:k + 512]) + "\n" for k in range(0, len(spans), 512)))
        outputs = {}
        for threads in ("1", "2"):
            result = lens("report", run, "--json", "--threads", threads)
            self.assertEqual(result.returncode, 0, result.stderr)
            outputs[threads] = result.stdout
        self.assertEqual(outputs["2"], outputs["1"])
        figures = json.loads(outputs["2"])
        counts = {s["name"]: s["count"] for s in figures["spans"]}
        self.assertEqual(counts["a.5"], 11)
        self.assertEqual(counts["(other span names)"], 10_000)
        self.assertEqual(figures["read"]["spans_of_other_names"], 10_000)


if __name__ == "__main__":
    unittest.main()
