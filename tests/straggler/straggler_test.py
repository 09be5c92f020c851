"""Stragglers found while the job trains (lens/straggler.h), on real 4-rank pretrain_gpt jobs of the shape users run
most (pipeline 2 x data 2: every stage has 2 ranks): a rank slowed by the trainer's testing flag on a coarse
production job whose only exporting rank is another one, a rank paused from outside (SIGSTOP/SIGCONT, as a noisy
neighbour or throttling would), and unslowed runs that must name no one. `lens report` of the same run names the
same rank. Run alone (ctest RUN_SERIAL): the figures are timings."""

import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pauser import Pauser  # noqa: E402

TRAINER = os.environ.get("LENS_PRETRAIN_GPT")
PYTHON_WITH_OTEL = os.environ.get("LENS_VENV_PYTHON")  # the Python trainer's interpreter (opentelemetry-api)
PYTHON_PACKAGE = os.environ.get("LENS_PYTHON_PACKAGE")  # where the built lens package is
PYTHON_TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python",
                              "pretrain_gpt.py")
LENS = os.environ.get("LENS_TOOL")
INTERVAL = 10
ITERATIONS = 40
MODEL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "32",
         "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2", "--global-batch-size", "16",
         "--log-interval", "10"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def start_job(directory, flags=(), env=None, groups="default", iterations=ITERATIONS, python=False):
    """Starts pretrain_gpt (the C++ one, or the Python one) on 4 ranks by hand (as torchrun would); returns the
    processes."""
    base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port(), "WORLD_SIZE": "4",
            "MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": directory,
            "MEGATRON_OTEL_STRAGGLER_INTERVAL": str(INTERVAL), "MEGATRON_OTEL_LOGS_ENABLED": "1",
            "OTEL_METRIC_EXPORT_INTERVAL": "500", **(env or {})}
    program = [TRAINER]
    if python:
        program = [PYTHON_WITH_OTEL, PYTHON_TRAINER]
        base.update(PYTHONPATH=PYTHON_PACKAGE, OMP_NUM_THREADS="1")
    return [subprocess.Popen([*program, *MODEL, "--train-iters", str(iterations), *flags, "--otel-enabled",
                              "--otel-span-groups", groups],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(4)]


def finish(ranks):
    outputs = [r.communicate(timeout=240)[0] for r in ranks]
    if any(r.returncode != 0 for r in ranks):
        raise AssertionError(outputs)
    return outputs


def lines_of(directory, kind):
    for path in sorted(glob.glob(os.path.join(directory, "*", f"rank*.{kind}.jsonl"))):
        with open(path) as f:
            yield os.path.basename(path), [json.loads(line) for line in f if line.strip()]


def attributes(entry):
    return {a["key"]: next(iter(a["value"].values())) for a in entry.get("attributes", [])}


# Where each signal's items sit in an OTLP/JSON document.
ITEMS = {"metrics": ("resourceMetrics", "scopeMetrics", "metrics"), "logs": ("resourceLogs", "scopeLogs", "logRecords"),
         "traces": ("resourceSpans", "scopeSpans", "spans")}


def items_of(directory, kind):
    """Every metric, log record or span of the run's files of `kind`."""
    resources, scopes, items = ITEMS[kind]
    for _, documents in lines_of(directory, kind):
        for d in documents:
            for resource in d[resources]:
                for scope in resource[scopes]:
                    yield from scope[items]


def last_gauges(directory, name):
    """{rank: value} of a gauge per dl.rank (None when it has no dl.rank), as last exported."""
    values = {}
    for m in items_of(directory, "metrics"):
        if m["name"] == name:
            for p in m["gauge"]["dataPoints"]:
                rank = attributes(p).get("dl.rank")
                values[None if rank is None else int(rank)] = float(p.get("asDouble", p.get("asInt")))
    return values


def straggler_logs(directory):
    """The straggler log records: (rank named, iteration, body)."""
    return [(int(a["dl.rank"]), int(a["megatron.iteration"]), r["body"]["stringValue"])
            for r in items_of(directory, "logs") if "lens.straggler.score" in (a := attributes(r))]


def straggler_events(directory):
    return [(s["name"], attributes(e)) for s in items_of(directory, "traces") for e in s.get("events", [])
            if e["name"] == "lens.straggler"]


def report(directory):
    result = subprocess.run([LENS, "report", directory, "--json"], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)["stragglers"]


def windows_flagging(logs, rank):
    return sorted({iteration for named, iteration, _ in logs if named == rank})


@unittest.skipUnless(TRAINER and LENS, "LENS_PRETRAIN_GPT and LENS_TOOL name the trainer and the tool (set by ctest)")
class StragglerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def assert_named_alone(self, directory, rank, windows, of):
        """`rank` flagged in `windows` windows of `of` or more, and in a straggler event; no other rank named. Named
        is the rule's persistence test, as `lens report` applies it (flagged in more than half of the steps,
        StragglerRule::kShare): a single window flags whichever rank the scheduler starved through most of it, on
        any machine that runs more threads than it has cores (4 ranks beside two busy loops on 2 cores: ranks 0 and
        3 of one unslowed run at 1.33x and 1.74x, each in one window), while the rank slowed here is flagged in
        nearly every window. So another rank is accepted in up to half of the windows (not named: exactly half is
        not persistence), and in fewer than the slowed one."""
        logs = straggler_logs(directory)
        flagged = len(windows_flagging(logs, rank))
        self.assertGreaterEqual(flagged, windows, logs)
        events = straggler_events(directory)
        self.assertEqual({name for name, _ in events}, {"megatron.train"})
        event_ranks = [int(a["dl.rank"]) for _, a in events]
        self.assertIn(rank, event_ranks, events)
        for other in ({named for named, _, _ in logs} | set(event_ranks)) - {rank}:
            for count, seen in ((len(windows_flagging(logs, other)), logs), (event_ranks.count(other), events)):
                self.assertLessEqual(count, of / 2, seen)
                self.assertLess(count, flagged, seen)
        return logs

    def test_a_slowed_rank_is_named_while_a_coarse_job_trains_by_the_one_rank_that_exports(self):
        # Production's `default` groups time no micro-batch, and only rank 3 exports (single_rank): rank 1, which
        # exports nothing, still keeps its phases and is named.
        directory = os.path.join(self.tmp.name, "telemetry")
        finish(start_job(directory, ["--testing-slow-rank", "1", "--testing-slow-ms", "15"]))
        self.assertEqual(sorted(name for name, _ in lines_of(directory, "metrics")), ["rank3.metrics.jsonl"])
        logs = self.assert_named_alone(directory, 1, windows=3, of=ITERATIONS // INTERVAL)
        self.assertIn("rank 1 (stage 0) is a straggler over the 10 steps to iteration",
                      next(body for named, _, body in logs if named == 1))
        self.assertEqual(last_gauges(directory, "lens.straggler.flagged").get(1), 1)
        scores = last_gauges(directory, "lens.straggler.score")
        self.assertEqual(sorted(scores), [0, 1, 2, 3])
        self.assertGreaterEqual(scores[1], 1.3, scores)
        compute, wait = last_gauges(directory, "lens.step.compute"), last_gauges(directory, "lens.step.wait")
        self.assertGreater(compute[1], compute[0])
        self.assertLess(wait[1], wait[0])  # its peer waits for it
        # The heartbeat and the share of wall time in steps, from the same rank.
        self.assertEqual(last_gauges(directory, "lens.progress.iteration"), {None: ITERATIONS})
        self.assertTrue(0 < last_gauges(directory, "lens.goodput.ratio")[None] < 1)

    def test_a_rank_paused_from_outside_is_named_online_and_by_lens_report(self):
        # 40 % of cycles of 12-38 ms stopped (SIGSTOP/SIGCONT from this process): nothing in the trainer knows. The
        # cycles are shorter than a step's compute (18-28 ms on a fast machine), so that most steps hold a pause: with
        # cycles of 25-75 ms the rank was flagged there in 38 windows of 44, only 3 of 4 in six runs of 11; with these,
        # in 38 of 40, 3 of 4 in two runs of 10.
        directory = os.path.join(self.tmp.name, "telemetry")
        ranks = start_job(directory, groups="all", env={"MEGATRON_OTEL_RANK_STRATEGY": "all_ranks"})
        with Pauser(ranks[2].pid, share=0.4, period=0.025) as pauser:
            finish(ranks)
        self.assertGreater(pauser.cycles, 20)
        self.assert_named_alone(directory, 2, windows=3, of=ITERATIONS // INTERVAL)
        # Every rank exports; the lowest one alone scores and records.
        self.assertEqual([name for name, docs in lines_of(directory, "metrics")
                          if any("lens.straggler" in json.dumps(d) for d in docs)], ["rank0.metrics.jsonl"])
        offline = report(directory)
        self.assertEqual([r["rank"] for r in offline["named"]], [2], offline)
        self.assertGreaterEqual(offline["named"][0]["score"], 1.3)

    @unittest.skipUnless(PYTHON_WITH_OTEL and PYTHON_PACKAGE, "set by ctest: LENS_VENV_PYTHON, LENS_PYTHON_PACKAGE")
    def test_the_python_trainer_names_a_rank_paused_from_outside(self):
        # Eight windows, named in five at least. The pauses' cycles (12-38 ms) are shorter than a step's compute, so
        # that most steps hold one: the rule takes medians over a window's steps, and where a step's compute is
        # shorter than a cycle only some steps are paused. With cycles of 25-75 ms, on a machine whose Python steps
        # compute in 28 ms, the paused rank was flagged in 15 windows of 24 (3 of 6 in a CI run); with these, in 70
        # of 78 (at least 4 of 6 and 7 of 8 a run; 1.34-2.23x its peers in the runs of 60 steps). On machines of 51 ms
        # steps, the longer cycles gave 30 of 32.
        directory = os.path.join(self.tmp.name, "telemetry")
        iterations = 80
        ranks = start_job(directory, python=True, iterations=iterations)
        with Pauser(ranks[1].pid, share=0.4, period=0.025):
            finish(ranks)
        self.assert_named_alone(directory, 1, windows=5, of=iterations // INTERVAL)  # rank 3 exports and scores
        # Its iteration boundaries are the heartbeat's, as the C++ trainer's are.
        self.assertEqual(last_gauges(directory, "lens.progress.iteration"), {None: iterations})

    def test_unslowed_runs_name_no_straggler(self):
        # Four ranks on this machine's 2 cores, at the default window of 20 steps: what a rule must not turn into a
        # verdict. One window can flag whichever rank the scheduler starved through most of it, and with two busy
        # loops beside the job it did (rank 0 at 1.45x and rank 3 at 1.31x in one window of one run in 20): that is
        # a noisy neighbour, which the rule exists to see. No rank is flagged persistently (in more than half of a
        # run's windows, StragglerRule::kShare), lens report names none, and each rank's lens.straggler.flagged,
        # which the alert reads, says what its last window's log record says.
        windows = ITERATIONS // 20
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                directory = os.path.join(self.tmp.name, f"telemetry{attempt}")
                finish(start_job(directory, groups="all", env={"MEGATRON_OTEL_RANK_STRATEGY": "all_ranks",
                                                               "MEGATRON_OTEL_STRAGGLER_INTERVAL": "20"}))
                logs = straggler_logs(directory)
                for rank in {named for named, _, _ in logs}:
                    self.assertLessEqual(len(windows_flagging(logs, rank)), windows / 2, logs)
                flagged = last_gauges(directory, "lens.straggler.flagged")
                in_last_window = {named for named, iteration, _ in logs if iteration == ITERATIONS}
                self.assertEqual(flagged, {rank: float(rank in in_last_window) for rank in range(4)}, logs)
                self.assertEqual(sorted(last_gauges(directory, "lens.straggler.score")), [0, 1, 2, 3])
                self.assertEqual(report(directory)["named"], [])

    def test_scoring_off_records_nothing(self):
        directory = os.path.join(self.tmp.name, "telemetry")
        finish(start_job(directory, ["--testing-slow-rank", "1", "--testing-slow-ms", "15"], iterations=20,
                         env={"MEGATRON_OTEL_STRAGGLER_INTERVAL": "0"}))
        self.assertEqual(last_gauges(directory, "lens.straggler.score"), {})
        self.assertEqual(straggler_logs(directory), [])

    def test_a_bad_interval_stops_every_rank_naming_the_variable(self):
        ranks = start_job(os.path.join(self.tmp.name, "telemetry"), env={"MEGATRON_OTEL_STRAGGLER_INTERVAL": "3"})
        outputs = [r.communicate(timeout=60)[0] for r in ranks]
        self.assertEqual([r.returncode for r in ranks], [2] * 4, outputs)
        for output in outputs:
            self.assertIn("MEGATRON_OTEL_STRAGGLER_INTERVAL='3'", output)


if __name__ == "__main__":
    unittest.main()
