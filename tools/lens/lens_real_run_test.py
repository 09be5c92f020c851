"""`lens report` and `lens convert` on real runs of pretrain_gpt (ranks launched as processes, files written by
lens): every span accounted for, a rank slowed on purpose named as the straggler, the pipeline bubble of each stage
1F1B's for the compute each stage measured, the HTML page in headless chromium and the Chrome JSON through its
checker. Run one at a time (ctest RUN_SERIAL): the figures are timings."""

import json
import os
import socket
import subprocess
import tempfile
import unittest

from lens_report_test import ARTIFACTS, TempDirTest, check_chrome_trace, check_page_against_figures, lens, open_page

TRAINER = os.environ.get("LENS_PRETRAIN_GPT")
FAKE_CUDART = os.environ.get("LENS_FAKE_CUDART", "")  # the CUDA runtime's simulator: device spans (docs/GPU.md)


def train(directory, world, flags, threads=None, env=None, groups="all"):
    """Runs pretrain_gpt on `world` ranks by hand (as torchrun would), every span group (or `groups`), files;
    returns the telemetry directory."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    telemetry = os.path.join(directory, "telemetry")
    base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(world),
            "MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": telemetry,
            "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks"}
    if threads:
        base["OMP_NUM_THREADS"] = str(threads)
    base.update(env or {})
    ranks = [subprocess.Popen([TRAINER, *flags, "--otel-enabled", "--otel-span-groups", groups],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(world)]
    outputs = [r.communicate(timeout=240)[0] for r in ranks]
    if any(r.returncode != 0 for r in ranks):
        raise AssertionError(outputs)
    return telemetry


def report(telemetry, *extra):
    result = lens("report", telemetry, "--json", *extra)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)


SMALL = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16"]


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class RealRunTest(TempDirTest):
    def test_every_span_is_accounted_for_in_both_name_modes_and_trace_layouts(self):
        # On the CUDA runtime's simulator, each layer's attention and MLP a 300 us kernel: device spans beside the
        # host's, counted once, in no host phase, on a device track of each rank.
        device = ["--testing-fake-cuda", FAKE_CUDART, "--testing-kernel-us", "300"] if FAKE_CUDART else []
        device_env = {"MEGATRON_OTEL_DEVICE_TIMING": "cuda", "LENS_CUDART_LIBRARY": FAKE_CUDART} if FAKE_CUDART else {}
        for names, layout in (("documented", "segment"), ("megatron", "step")):
            with self.subTest(names=names, layout=layout), tempfile.TemporaryDirectory() as tmp:
                telemetry = train(tmp, 2, SMALL + ["--pipeline-model-parallel-size", "2", "--micro-batch-size", "2",
                                                   "--global-batch-size", "8", "--train-iters", "4",
                                                   "--log-interval", "1", *device],
                                  env={"MEGATRON_OTEL_SPAN_NAMES": names, "MEGATRON_OTEL_TRACE_LAYOUT": layout,
                                       **device_env})
                f = report(telemetry)
                self.assertEqual((f["run"]["world_size"], f["run"]["pipeline_parallel_size"]), (2, 2))
                self.assertEqual([(s["iteration"], s["ranks"]) for s in f["steps"]], [(i, 2) for i in (1, 2, 3, 4)])
                self.assertEqual([entry["iteration"] for entry in f["loss"]], [1, 2, 3, 4])
                device_spans = sum(s["device"]["count"] for s in f["spans"] if s["device"])
                if device:
                    self.check_device_time(f)
                counted = sum(s["count"] for s in f["spans"]) + device_spans
                self.assertEqual(counted, f["read"]["spans"])
                self.assertEqual((f["lost"]["spans_exported"], f["lost"]["spans_dropped"]), (counted, 0))
                self.assertEqual(f["read"]["problems"], [])
                self.assertEqual([b["microbatches"] for b in f["bubble"]], [4, 4])
                for rank in f["phases"]["per_rank"]:  # every phase found under both names
                    for phase in ("forward_ms", "backward_ms", "pipeline_receive_wait_ms", "optimizer_ms"):
                        self.assertGreater(rank[phase], 0, (phase, rank))
                trace = os.path.join(tmp, "trace.json")
                self.assertEqual(lens("convert", telemetry, "--to", "chrome-json", "-o", trace).returncode, 0)
                status, summary = check_chrome_trace(trace)
                self.assertEqual((status, summary["problems"]), (0, []))
                self.assertTrue(summary["device_tracks_hold_only_device_spans"])
                if device:  # every device span on its rank's device track
                    self.assertEqual(sum(summary["device_events"].values()), device_spans)
                    self.assertEqual(sorted(summary["device_events"]), ["rank 0 (pp 0, dp 0)", "rank 1 (pp 1, dp 0)"])
                    self.assertTrue(all(summary["device_events"].values()), summary["device_events"])
                if device and layout == "step":  # the page, in a real browser: a device track a rank
                    page_path = os.path.join(tmp, "report.html")
                    self.assertEqual(lens("report", telemetry, "--html", page_path).returncode, 0)
                    page = open_page(page_path, os.path.join(ARTIFACTS, "lens_report_device.png"))
                    check_page_against_figures(self, page, report(telemetry))
                    self.assertEqual(page["device_labels"], 2)
                    self.assertGreater(page["device_spans_drawn"], 0)
                # a flow for every linked receive; in the step layout also for each step's link to its segment, and
                # for each point-to-point receive's link to its send (the send's link back is a peer link: no arrow)
                counts = {s["name"]: s["count"] for s in f["spans"]}
                linked = counts["megatron.pp.recv_forward.linked"]
                self.assertGreater(linked, 0)
                receives = counts["megatron.p2p.recv_forward"] + counts["megatron.p2p.recv_backward"]
                # With Megatron's names each segment is a trace of its own linked to megatron.startup: a flow a rank.
                segments = counts["megatron.train"] if names == "megatron" else 0
                self.assertEqual(summary["flows"], linked + segments + (8 + receives if layout == "step" else 0))
                self.assertEqual((summary["devtools_bound_flows"], summary["backwards_flows"]), (summary["flows"], 0))

    def check_device_time(self, f):
        """Device time beside host time: each device-timed name's device figures and launch overhead, no `.device`
        name of its own, and the phases' device time and overhead."""
        by_name = {s["name"]: s for s in f["spans"]}
        self.assertFalse([name for name in by_name if name.endswith(".device")])
        for name in ("megatron.layer.self_attention", "megatron.layer.mlp"):
            s = by_name[name]
            self.assertEqual(s["device"]["count"], s["count"], name)
            self.assertGreaterEqual(s["device"]["p50_ms"], 0.3, name)  # its 300 us kernel
            self.assertAlmostEqual(s["launch_overhead_ms"], s["mean_ms"] - s["device"]["mean_ms"], places=9)
        steps = [by_name[n] for n in ("megatron.train_step", "megatron.train.iteration") if n in by_name]
        self.assertEqual([s["device"] for s in steps], [None])  # the step's group is not a device group by default
        for row in f["phases"]["per_rank"]:
            for phase in ("forward", "backward"):
                self.assertGreater(row["device_ms"][phase], 0, (phase, row))
                self.assertAlmostEqual(row["launch_overhead_ms"][phase],
                                       row[phase + "_ms"] - row["device_ms"][phase], places=9)
            self.assertIsNone(row["device_ms"]["optimizer"])  # no device group

    def test_what_per_step_groups_cannot_measure_is_said_not_printed_as_zero(self):
        # per_step exports steps, forward-backward, optimizer and communication, not micro-batches: forward and
        # backward, the bubble and the straggler search have no figure (before: forward 0, backward 0, a 100 %
        # bubble, "stragglers: none"), and a gate on them cannot pass by default.
        telemetry = train(self.tmp.name, 4, SMALL + ["--pipeline-model-parallel-size", "2", "--micro-batch-size", "2",
                                                     "--global-batch-size", "8", "--train-iters", "3"],
                          groups="per_step")
        f = report(telemetry)
        mean = f["phases"]["mean_per_step"]
        self.assertEqual((mean["forward_ms"], mean["backward_ms"]), (None, None))
        self.assertGreater(mean["pipeline_receive_wait_ms"], 0)
        self.assertGreater(mean["optimizer_ms"], 0)
        self.assertEqual(sorted(f["phases"]["not_measured"]), ["backward", "forward"])
        self.assertIn("'microbatch'", f["phases"]["not_measured"]["forward"])
        self.assertTrue(all(r["forward_ms"] is None for r in f["phases"]["per_rank"]))
        self.assertEqual([(b["stage"], b["measured"], b["microbatches"]) for b in f["bubble"]],
                         [(0, None, 2), (1, None, 2)])
        self.assertAlmostEqual(f["bubble"][0]["theoretical"], 1 / 3)  # still known: (P-1)/(M+P-1)
        self.assertIn("'microbatch'", f["stragglers"]["not_scored"])
        self.assertEqual(f["stragglers"]["named"], [])
        text = lens("report", telemetry).stdout
        self.assertIn("forward - backward -", text)
        self.assertNotIn("100.0% measured", text)
        self.assertIn("stragglers: not scored", text)
        for gate in ("bubble>10", "bubble-excess>5", "straggler"):
            result = lens("report", telemetry, "--fail-if", gate)
            self.assertEqual(result.returncode, 2, (gate, result.stderr))
            self.assertIn("cannot decide", result.stderr)

    def test_a_slowed_rank_is_named_the_straggler(self):
        # 4 data-parallel replicas; rank 2 sleeps 60 ms in each micro-batch forward (a trainer testing aid): the
        # others wait for it in grad_sync.finish.
        telemetry = train(self.tmp.name, 4, SMALL + ["--micro-batch-size", "2", "--global-batch-size", "16",
                                                     "--train-iters", "20", "--testing-slow-rank", "2",
                                                     "--testing-slow-ms", "60"])
        f = report(telemetry)
        shares = {r["rank"]: r["share"] for r in f["stragglers"]["ranks"]}
        self.assertEqual(sorted(shares), [0, 1, 2, 3])
        self.assertGreaterEqual(shares[2], 0.9, f["stragglers"])
        for rank in (0, 1, 3):
            self.assertLessEqual(shares[rank], 0.1, f["stragglers"])
        self.assertEqual([r["rank"] for r in f["stragglers"]["named"]], [2])
        slow = f["stragglers"]["named"][0]
        self.assertLess(slow["wait_ms_median"], slow["stage_wait_ms_median"])  # the others wait for it
        self.assertEqual(lens("report", telemetry, "--fail-if", "straggler").returncode, 1)
        # The page a person opens, in chromium: a lane per rank, the tables of --json; a screenshot kept.
        page_path = os.path.join(self.tmp.name, "report.html")
        self.assertEqual(lens("report", telemetry, "--html", page_path).returncode, 0)
        screenshot = os.path.join(ARTIFACTS, "lens_report_straggler.png")
        page = open_page(page_path, screenshot)
        check_page_against_figures(self, page, report(telemetry))
        self.assertEqual(page["verdict"], "Stragglers named: rank 2")
        self.assertGreater(os.path.getsize(screenshot), 10_000)
        # And the same run as Chrome JSON.
        trace = os.path.join(self.tmp.name, "trace.json.gz")
        self.assertEqual(lens("convert", telemetry, "--to", "chrome-json", "-o", trace).returncode, 0)
        status, summary = check_chrome_trace(trace)
        self.assertEqual((status, summary["problems"]), (0, []))
        self.assertEqual({(p["rank"], p["pp"], p["dp"]) for p in summary["processes"]}, {(r, 0, r) for r in range(4)})

    def test_tensor_parallel_waits_are_a_phase_and_stragglers_are_compared_at_their_position(self):
        # TP 2 x PP 2 (Megatron's rank order: rank = stage x 2 + tensor-parallel rank): every rank waits in its
        # tensor-parallel all-reduces, a phase of its own that the step's phases add up with; no rank has a replica
        # at its stage and position, so none is scored, and none is named.
        tp = ["--tensor-model-parallel-size", "2", "--micro-batch-size", "2"]
        pipeline = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", "--train-iters", "4"]
        with tempfile.TemporaryDirectory() as tmp:
            f = report(train(tmp, 4, SMALL + tp + pipeline))
        self.assertEqual((f["run"]["tensor_parallel_size"], f["run"]["pipeline_parallel_size"]), (2, 2))
        phases = ("forward", "backward", "pipeline_receive_wait", "grad_sync_wait", "tensor_parallel_wait", "optimizer")
        for row in f["phases"]["per_rank"]:
            self.assertGreater(row["tensor_parallel_wait_ms"], 0, row)
            self.assertGreater(row["forward_ms"], 0, row)
            accounted = sum(row[p + "_ms"] for p in phases) + row["other_ms"]
            self.assertAlmostEqual(accounted, row["step_ms"], delta=1e-6 * row["step_ms"])
        self.assertEqual((f["stragglers"]["unscored_stages"], f["stragglers"]["named"]), ([0, 1], []))
        # TP 2 x DP 2: rank 1 sleeps 60 ms in each micro-batch forward. Its tensor-parallel partner (rank 0) waits
        # for it inside each layer, its replica (rank 3) in the gradient sync: rank 1 alone is named, compared with
        # rank 3; rank 0, which computes no longer than its replica (rank 2), is not.
        with tempfile.TemporaryDirectory() as tmp:
            slowed = ["--global-batch-size", "16", "--train-iters", "20", "--testing-slow-rank", "1",
                      "--testing-slow-ms", "60"]
            f = report(train(tmp, 4, SMALL + tp + slowed))
        self.assertEqual([r["rank"] for r in f["stragglers"]["named"]], [1], f["stragglers"])
        shares = {r["rank"]: r["share"] for r in f["stragglers"]["ranks"]}
        for rank in (0, 2, 3):
            self.assertLessEqual(shares[rank], 0.1, f["stragglers"])
        partner = f["phases"]["per_rank"][0]
        self.assertGreater(partner["tensor_parallel_wait_ms"], partner["forward_ms"])  # it waited for rank 1

    def test_the_bubble_of_each_stage_is_1f1bs_for_the_compute_each_stage_measured(self):
        # PP = 2, DP = 1, M = 4: (P-1)/(M+P-1) = 20 % when both stages compute a micro-batch in the same time. On a
        # shared machine they do not (a stage the scheduler starves computes longer, and the other waits for it: 16
        # and 31 % for stages 1.2x apart), so the expectation comes from this run's own compute: 1F1B over two
        # stages whose micro-batches take c0 and c1 lasts M * max(c) + min(c) (the slower stage waits only for the
        # other's first or last micro-batch), and stage s idles 1 - M * c_s / that. Equal stages give 20 %. The
        # first two steps (start-up) are left out of both figures.
        with tempfile.TemporaryDirectory() as tmp:
            telemetry = train(tmp, 2, ["--num-layers", "8", "--hidden-size", "96", "--num-attention-heads", "4",
                                       "--seq-length", "64", "--pipeline-model-parallel-size", "2",
                                       "--micro-batch-size", "4", "--global-batch-size", "16",
                                       "--train-iters", "12"], threads=1)
            f = report(telemetry, "--steps", "3-12")
        self.assertEqual([(b["stage"], b["microbatches"]) for b in f["bubble"]], [(0, 4), (1, 4)])
        for b in f["bubble"]:
            self.assertAlmostEqual(b["theoretical"], 0.2)
        self.assertAlmostEqual(one_f_one_b_bubble([10.0, 10.0], 4)[0], 0.2)
        compute = [r["forward_ms"] + r["backward_ms"] for r in sorted(f["phases"]["per_rank"], key=lambda r: r["rank"])]
        expected = one_f_one_b_bubble(compute, 4)
        measured = [b["measured"] for b in f["bubble"]]
        for stage in (0, 1):  # a step's stall the model has not (a stage paused mid-step) shows as more than 5 points
            self.assertLess(abs(measured[stage] - expected[stage]), 0.05, (measured, expected, compute))


def one_f_one_b_bubble(compute_per_step, microbatches):
    """Each stage's idle share of a 1F1B step over two stages that compute `compute_per_step` each (the step's
    micro-batches, forward and backward) in `microbatches` micro-batches of equal length."""
    slow, fast = max(compute_per_step), min(compute_per_step)
    step = slow + fast / microbatches
    return [1 - c / step for c in compute_per_step]


if __name__ == "__main__":
    unittest.main()
