"""lens on a job of two nodes: pretrain_gpt under `torchrun --nnodes 2 --nproc_per_node 2` (pipeline 2 x data 2),
each node a network and UTS namespace of its own (fabric.py: its own hostname, address and FILE_DIR), the
rendezvous on node 0's address, Gloo over the nodes' veth links, and a real OpenTelemetry Collector on a third node.

What a user of a real cluster relies on and one host hides: one run id on every rank, `host.name` naming each node,
every span accounted for at the Collector; `lens ctl` from another node than rank 0's; hang snapshots on each node's
own disk and `lens hang` given every node's directory; `lens report` given one directory per node. And the faults:
a node lost mid-run (the others end naming it); the Collector unreachable from one node only; a node's directory
missing for `lens hang`. Run alone (ctest
RUN_SERIAL): the jobs are timings."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import unittest

import fabric
from fabric import Fabric

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "collector"))
import peers  # noqa: E402 (tests/collector: the Collector as a peer)

TRAINER = os.environ.get("LENS_PRETRAIN_GPT", "")
LENS = os.environ.get("LENS_TOOL", "")
TORCHRUN = shutil.which("torchrun", path="/usr/bin:/usr/local/bin") or ""
MASTER_PORT = "29500"  # each node's namespace is fresh: the port is free there
SHAPE = ["--pipeline-model-parallel-size", "2", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads",
         "2", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8", "--otel-enabled"]
HOST_OF_RANK = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}  # torchrun: node_rank * nproc_per_node + local rank
STATS = re.compile(r"lens: spans: (\d+) produced, (\d+) exported, (\d+) dropped")


def lens(*args, node=None, timeout=120):
    argv = [LENS, *args]
    return subprocess.run(node.command(argv) if node else argv, capture_output=True, text=True, timeout=timeout)


class Job:
    """pretrain_gpt on nodes 0 and 1 of `fabric`, two ranks each, launched by torchrun on each node as a user would
    (the same command but --node_rank), telemetry under each node's own directory."""

    def __init__(self, fabric, flags, env):
        self.nodes = fabric.nodes[:2]
        self.launchers = []
        for node in self.nodes:
            node_env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0",
                        "MEGATRON_OTEL_FILE_DIR": self.file_dir(node), "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks",
                        "OTEL_BSP_SCHEDULE_DELAY": "200", **env}
            command = [TORCHRUN, "--nnodes", "2", "--nproc_per_node", "2", "--node_rank", str(node.index),
                       "--master_addr", self.nodes[0].address, "--master_port", MASTER_PORT,
                       # torch 1.13 under Python 3.11: --redirects/--tee avoid its Std.from_str crash
                       "--no_python", "--redirects", "9:0", "--tee", "9:0", "--monitor_interval", "0.2",
                       TRAINER, *SHAPE, *flags]
            self.launchers.append(node.popen(command, env=node_env, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True))

    @staticmethod
    def file_dir(node):
        return os.path.join(node.directory, "telemetry")

    def run_dir(self, node, seconds=60):
        """The node's <FILE_DIR>/<run id>, once it exists."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = glob.glob(os.path.join(self.file_dir(node), "*", ""))
            if found:
                return found[0].rstrip("/")
            self.check_running()
            time.sleep(0.05)
        raise AssertionError(f"no run directory on {node.name} within {seconds} s")

    def check_running(self):
        for node, launcher in zip(self.nodes, self.launchers):
            if launcher.poll() is not None:
                raise AssertionError(f"torchrun on {node.name} ended ({launcher.returncode}):\n"
                                     f"{launcher.communicate()[0][-4000:]}")

    def finish(self, seconds=240):
        """Every node's output once its torchrun ended; fails naming the node whose did not end well."""
        outputs = [launcher.communicate(timeout=seconds)[0] for launcher in self.launchers]
        for node, launcher, output in zip(self.nodes, self.launchers, outputs):
            if launcher.returncode != 0:
                raise AssertionError(f"torchrun on {node.name} exited {launcher.returncode}:\n{output[-4000:]}")
        return outputs

    def stop(self):
        for launcher in self.launchers:
            if launcher.poll() is None:
                launcher.terminate()
        return [launcher.communicate(timeout=60)[0] for launcher in self.launchers]


def span_stats(output):
    """(produced, exported, dropped) of each rank that printed its shutdown line."""
    return [tuple(map(int, m)) for m in STATS.findall(output)]


def resource_attributes(request_resource):
    return {a["key"]: next(iter(a["value"].values())) for a in request_resource.get("attributes", [])}


def collected_spans(collector):
    """(resource attributes, span name) of every span the Collector's file exporter wrote."""
    return [(resource_attributes(rs.get("resource", {})), s["name"])
            for request in collector.read("traces") for rs in request.get("resourceSpans", [])
            for ss in rs.get("scopeSpans", []) for s in ss.get("spans", [])]


class CollectorOnNode(peers.Collector):
    """The test Collector, run in a node and listening on its address; ready when it says so in its log (its
    ports are in the node's namespace, out of this process's reach)."""

    def __init__(self, node, directory):
        super().__init__(directory, host=node.address)
        self.args = node.command(self.args)
        self.url = f"http://{node.address}:{self.http_port}"

    def ready(self):
        return "Everything is ready" in peers.read_tail(self.log_path, 100000)


@unittest.skipUnless(TRAINER and LENS and TORCHRUN, "set by ctest: LENS_PRETRAIN_GPT, LENS_TOOL; torchrun")
class MultiNodeTest(peers.PeerTest):
    def setUp(self):
        super().setUp()
        self.fabric = Fabric(["node0", "node1", "collector"], self.dir)
        self.addCleanup(self.fabric.close)  # after tearDown's stop of the peers: whatever failed, nothing is left

    def start_collector(self):
        return self.start(CollectorOnNode(self.fabric.nodes[2], self.dir))

    def test_one_run_id_each_nodes_host_name_and_every_span_at_a_collector_on_a_third_node(self):
        collector = self.start_collector()
        job = Job(self.fabric, ["--train-iters", "12", "--log-interval", "1", "--otel-span-groups", "all"],
                  {"MEGATRON_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                   "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url})
        stats = [s for output in job.finish() for s in span_stats(output)]
        self.assertEqual(len(stats), 4, "a shutdown line of each rank")
        exported = sum(s[1] for s in stats)
        self.assertEqual([s[2] for s in stats], [0] * 4, stats)
        self.assertEqual([s[0] for s in stats], [s[1] for s in stats], stats)
        wait_for(lambda: len(collected_spans(collector)) >= exported)
        self.assertEqual(collector.stop(), 0, collector.log())
        spans = collected_spans(collector)
        self.assertEqual(len(spans), exported, "every span the ranks exported, once")
        self.assertEqual({r["nemo.run.id"] for r, _ in spans}.__len__(), 1, "one run id on every rank")
        hosts = {int(r["dl.rank"]): r["host.name"] for r, _ in spans}
        self.assertEqual(hosts, HOST_OF_RANK)
        report = json.loads(lens("report", "--json", collector.output).stdout)
        self.assertEqual((report["run"]["world_size"], report["run"]["pipeline_parallel_size"]), (4, 2))
        self.assertEqual([(s["iteration"], s["ranks"]) for s in report["steps"]], [(i, 4) for i in range(1, 13)])

    def test_lens_ctl_from_node1_switches_every_rank_at_one_iteration(self):
        """Rank 0 serves the endpoint on node 0's address (CONTROL_ADDRESS); the token file is copied to node 1, as
        a user copies it; then `lens report` of both nodes' directories equals that of one holding all files."""
        job = Job(self.fabric, ["--train-iters", "100000", "--log-interval", "1000", "--testing-slow-rank", "0",
                                "--testing-slow-ms", "40"],
                  {"MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_CONTROL": "1",
                   "MEGATRON_OTEL_CONTROL_ADDRESS": f"{self.fabric.nodes[0].address}:0",
                   "MEGATRON_OTEL_SPAN_GROUPS": "default"})
        node0, node1 = self.fabric.nodes[:2]
        try:
            run0 = job.run_dir(node0)
            wait_for(lambda: os.path.exists(os.path.join(run0, "control.json")), 60)
            copied = os.path.join(node1.directory, "from-node0", os.path.basename(run0))
            os.makedirs(copied)
            shutil.copy(os.path.join(run0, "control.json"), copied)
            status = lambda: json.loads(lens("ctl", copied, "status", node=node1).stdout)  # noqa: E731
            wait_for(lambda: status()["iteration"] >= 2, 60)
            result = lens("ctl", copied, "span-groups", "per_step", "--for", "5", node=node1)
            self.assertEqual(result.returncode, 0, result.stderr)
            after = json.loads(result.stdout)["from_iteration_after"]
            wait_for(lambda: status()["iteration"] >= after + 10, 60)
            self.assertIsNone(status()["pending"])
        finally:
            job.stop()
        run1 = job.run_dir(node1)
        self.assertEqual(sorted(os.listdir(run1)),
                         [f"rank{r}.{s}.jsonl" for r in (2, 3) for s in ("metrics", "traces")],
                         "node 1's ranks write on node 1's disk only")
        # Every rank's step spans (default has none), read from both nodes' directories: exactly 5 iterations, each
        # on all 4 ranks, from one iteration on.
        steps = steps_in(run0, run1)
        first = steps[0][0]
        self.assertLessEqual(first, after + 2)
        self.assertEqual(steps, [(first + k, 4) for k in range(5)])
        both = lens("report", "--json", run0, run1)
        self.assertEqual(both.returncode, 0, both.stderr)
        merged = os.path.join(self.dir, "merged", os.path.basename(run0))
        shutil.copytree(run0, merged)
        for path in glob.glob(os.path.join(run1, "*")):
            shutil.copy(path, merged)
        one = json.loads(lens("report", "--json", merged).stdout)
        self.assertEqual({**json.loads(both.stdout), "read": None}, {**one, "read": None})

    def test_a_rank_stalled_on_node1_each_node_writes_its_snapshots_and_lens_hang_names_it(self):
        job = Job(self.fabric, ["--train-iters", "100000", "--log-interval", "1000", "--testing-slow-rank", "3",
                                "--testing-stall-iteration", "4"],
                  {"MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_HANG_TIMEOUT": "2",
                   "MEGATRON_OTEL_SPAN_GROUPS": "all,-layer"})
        node0, node1 = self.fabric.nodes[:2]
        try:
            runs = [job.run_dir(node) for node in (node0, node1)]
            wait_for(lambda: all(len(glob.glob(os.path.join(run, "rank*.snapshot.json"))) == 2 for run in runs), 60)
            on_disk = [sorted(os.path.basename(p) for p in glob.glob(os.path.join(run, "rank*.snapshot.json")))
                       for run in runs]
            self.assertEqual(on_disk, [["rank0.snapshot.json", "rank1.snapshot.json"],
                                       ["rank2.snapshot.json", "rank3.snapshot.json"]])
            verdict = lens("hang", "--json", *runs)
            self.assertEqual(verdict.returncode, 0, verdict.stderr)
            self.assertEqual(json.loads(verdict.stdout)["behind"], [3])
            text = lens("hang", *runs).stdout
            self.assertIn("4 of 4 ranks wrote a snapshot (watchdog)", text)
            self.assertIn("behind: rank 3 is in megatron.microbatch.forward", text)
            # Node 1's directory not copied (its disk unreachable): its ranks are named as without a snapshot.
            missing = lens("hang", runs[0], os.path.join(self.dir, "node1-unreachable"))
            self.assertEqual(missing.returncode, 0, missing.stderr)
            self.assertIn("no such directory", missing.stderr)
            self.assertIn("ranks 2, 3: no snapshot", missing.stdout)
        finally:
            job.stop()

    def test_a_node_gone_mid_run_ends_the_others_naming_its_ranks_and_host(self):
        """Node 1's namespace and every process in it killed (a node lost): its connections are reset, and node 0's
        ranks end within seconds, each naming ranks 2, 3 and node1, their telemetry flushed."""
        job = Job(self.fabric, ["--train-iters", "100000", "--log-interval", "1000"],
                  {"MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_SPAN_GROUPS": "per_step"})
        node0, node1 = self.fabric.nodes[:2]
        lines = read_lines_as_they_come(job.launchers[0])
        run0 = job.run_dir(node0)
        wait_for(lambda: len(steps_in(run0)) >= 3, 60)
        lost_at = time.time()
        node1.kill_everything()
        named = "lost the connection to ranks 2, 3 on node1 (198.18.0.2): that node, or those ranks, stopped"
        wait_for(lambda: sum(named in line for _, line in lines) == 2, 30, lambda: "".join(line for _, line in lines))
        ended = [t - lost_at for t, line in lines if named in line]
        self.assertLess(max(ended), 10, "the documented bound: seconds, not Gloo's timeout")
        wait_for(lambda: len([line for _, line in lines if STATS.search(line)]) == 2, 30)
        for _, line in lines:
            if STATS.search(line):
                produced, exported, dropped = map(int, STATS.search(line).groups())
                self.assertEqual((exported, dropped), (produced, 0), "node 0's telemetry flushed as its ranks end")
        # torchrun's agent then waits in its exit barrier for node 1's agent (torch's 300 s): not lens's to shorten.
        job.launchers[0].kill()

    def test_lens_report_estimates_a_nodes_clock_offset_from_the_pipeline_links(self):
        """A real two-node run; node 1's files are then shifted by a known offset, as a host whose clock is off
        writes them. Behind: the warm-up receives on node 1 end before their sends on node 0 began, by the clocks;
        lens report says node 1's offset (within the fastest transfer of the known one) and the bubble it gives
        with the correction is the bubble of the run as written. Ahead: the links, which run from node 0 to node 1
        only, cannot see it, and the report says so."""
        job = Job(self.fabric, ["--train-iters", "20", "--log-interval", "5", "--otel-span-groups", "all,-layer"],
                  {"MEGATRON_OTEL_EXPORTER": "file"})
        job.finish()
        run0, run1 = (job.run_dir(node) for node in self.fabric.nodes[:2])
        as_written = self.report(run0, run1)
        self.assertEqual(as_written["clocks"]["reference_host"], "node0")
        self.assertEqual([h["host"] for h in as_written["clocks"]["hosts"]], ["node1"])
        self.assertEqual(as_written["clocks"]["hosts"][0]["offset_ms"], 0)  # one machine's clock: nothing runs back
        self.assertIn("node1: links run one way only", as_written["clocks"]["not_bounded"])
        bubble = {b["stage"]: b["measured"] for b in as_written["bubble"]}
        # As written, the report's lower bound on node 1's offset is minus this run's fastest node-0-to-node-1 transfer.
        fastest_transfer_ms = -as_written["clocks"]["hosts"][0]["at_least_ms"]
        self.assertGreater(fastest_transfer_ms, 0)
        for shift_ms in (-300, 300):
            with self.subTest(node1_clock=f"{shift_ms:+} ms"):
                shifted = os.path.join(self.dir, f"node1-shifted{shift_ms}", os.path.basename(run1))
                shift_files(run1, shifted, shift_ms * 1_000_000)
                report = self.report(run0, shifted)
                clock = report["clocks"]["hosts"][0]
                if shift_ms < 0:
                    self.assertTrue(report["clocks"]["corrected"])
                    # The shift, less the fastest transfer (the least correction that runs every link forward).
                    self.assertAlmostEqual(clock["offset_ms"], 300 - fastest_transfer_ms, delta=0.01)
                    self.assertLessEqual(clock["offset_ms"], 300)
                    for b in report["bubble"]:
                        self.assertAlmostEqual(b["measured"], bubble[b["stage"]], delta=0.02)
                    trace = os.path.join(self.dir, f"trace{shift_ms}.json")
                    self.assertEqual(lens("convert", run0, shifted, "--to", "chrome-json", "-o", trace).returncode, 0)
                    self.assertEqual(backward_flows(trace), 0)
                else:
                    self.assertFalse(report["clocks"]["corrected"])
                    self.assertIn("node1: links run one way only", report["clocks"]["not_bounded"])
                    text = lens("report", run0, shifted).stdout
                    self.assertIn("not bounded, so figures that compare these hosts' times", text)
                    page = os.path.join(self.dir, "page.html")
                    self.assertEqual(lens("report", run0, shifted, "--html", page).returncode, 0)
                    with open(page, encoding="utf-8") as f:
                        self.assertIn("Not bounded, so what compares these hosts' times may be off: node1",
                                      f.read())

    def report(self, *run_dirs):
        result = lens("report", "--json", *run_dirs)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_the_collector_unreachable_from_one_node_drops_there_only_and_counts_it(self):
        collector = self.start_collector()
        node1 = self.fabric.nodes[1]
        node1.run([fabric.IP, "route", "add", "unreachable", self.fabric.nodes[2].address + "/32"], check=True)
        job = Job(self.fabric, ["--train-iters", "12", "--log-interval", "1", "--otel-span-groups", "all"],
                  {"MEGATRON_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                   "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url})
        outputs = job.finish()
        node0_stats, node1_stats = span_stats(outputs[0]), span_stats(outputs[1])
        self.assertEqual((len(node0_stats), len(node1_stats)), (2, 2), outputs)
        for produced, exported, dropped in node0_stats:
            self.assertEqual((exported, dropped), (produced, 0), "node 0 loses nothing")
        for produced, exported, dropped in node1_stats:
            self.assertGreater(produced, 0)
            self.assertEqual((exported, dropped), (0, produced), "node 1 counts every span it could not send")
        exported = sum(s[1] for s in node0_stats)
        wait_for(lambda: len(collected_spans(collector)) >= exported)
        self.assertEqual(collector.stop(), 0, collector.log())
        spans = collected_spans(collector)
        self.assertEqual(len(spans), exported)
        self.assertEqual({int(r["dl.rank"]) for r, _ in spans}, {0, 1})


def shift_files(source, destination, shift_ns):
    """Copies a node's run directory with every time in it shifted by shift_ns, as a host whose clock is off by as
    much would have written it."""
    def shifted_time(value):  # a time of 0 is "not set" (a metric point's start): left so
        n = int(value)
        return value if n == 0 else type(value)(n + shift_ns)

    def shift(value):
        if isinstance(value, dict):
            return {k: shifted_time(v) if k.endswith("UnixNano") else shift(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shift(v) for v in value]
        return value

    os.makedirs(destination)
    for path in glob.glob(os.path.join(source, "*.jsonl")):
        with open(path, encoding="utf-8") as f, open(os.path.join(destination, os.path.basename(path)), "w") as out:
            for line in f:
                out.write(json.dumps(shift(json.loads(line))) + "\n")


def backward_flows(trace_path):
    """Flow arrows (Trace Event ph s/f pairs) whose end is before their start."""
    with open(trace_path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    starts = {e["id"]: e["ts"] for e in events if e.get("ph") == "s"}
    return sum(1 for e in events if e.get("ph") == "f" and e["ts"] < starts.get(e["id"], e["ts"]))


def read_lines_as_they_come(process):
    """A list that a thread fills with (seconds since the epoch, line) of `process`'s output as it comes."""
    lines = []

    def pump():
        for line in process.stdout:
            lines.append((time.time(), line))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def steps_in(*run_dirs):
    """[(iteration, ranks with its step span)] as `lens report` reads the run; [] while there is none."""
    result = lens("report", "--json", *run_dirs)
    return [(s["iteration"], s["ranks"]) for s in json.loads(result.stdout)["steps"]] if result.returncode == 0 else []


def wait_for(condition, seconds=20, seen=lambda: ""):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s; seen:\n{seen()[-4000:]}")
        time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
