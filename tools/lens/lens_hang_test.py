"""Hang snapshots and `lens hang` on a real pretrain_gpt job of 4 ranks (processes launched by hand, as torchrun
would; single_rank export, so three of the four ranks do not export): a rank stalled inside a micro-batch makes the
watchdog fire on every rank, and `lens hang` names that rank and its span; a rank stopped with SIGSTOP writes nothing
while the others answer SIGUSR1, and `lens hang` names it as the one without a snapshot. Also `lens hang`'s answer to
bad input. Run alone (ctest RUN_SERIAL): the watchdog is a timing."""

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

from lens_report_test import TempDirTest, lens

TRAINER = os.environ.get("LENS_PRETRAIN_GPT")
FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "100000", "--log-interval", "1000",
         "--otel-enabled"]


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class Job:
    """pretrain_gpt on 4 data-parallel ranks writing files; killed at the end (a hung job is not stopped cleanly)."""

    def __init__(self, directory, flags, extra_env, groups="all,-layer"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        self.run_dir = os.path.join(directory, "telemetry", "hang-run")
        env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "4",
               "OMP_NUM_THREADS": "1", "MEGATRON_OTEL_EXPORTER": "file",
               "MEGATRON_OTEL_FILE_DIR": os.path.join(directory, "telemetry"), "MEGATRON_OTEL_RUN_ID": "hang-run",
               "MEGATRON_OTEL_SPAN_GROUPS": groups, **extra_env}
        self.ranks = [subprocess.Popen([TRAINER, *FLAGS, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                      for r in range(4)]

    def snapshots(self):
        return sorted(glob.glob(os.path.join(self.run_dir, "rank*.snapshot.json")))

    def wait_for_snapshots(self, count, seconds):
        deadline = time.time() + seconds
        while len(self.snapshots()) < count:
            if time.time() > deadline:
                raise AssertionError(f"{len(self.snapshots())} snapshots of {count} within {seconds} s: "
                                     f"{self.snapshots()}")
            for r in self.ranks:
                if r.poll() is not None:
                    raise AssertionError(f"a rank ended ({r.returncode}): {r.communicate()[0][-3000:]}")
            time.sleep(0.1)
        return {s["rank"]: s for s in map(read_json, self.snapshots())}

    def kill(self):
        for r in self.ranks:
            if r.poll() is None:
                r.send_signal(signal.SIGCONT)
                r.kill()
        return [r.communicate(timeout=60)[0] for r in self.ranks]


def innermost(snapshot):
    """The innermost open span of the rank's training thread (the one with the most open spans)."""
    thread = max(snapshot["threads"], key=lambda t: len(t["open_spans"]))
    return thread["open_spans"][-1]


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class HangTest(TempDirTest):
    def test_the_watchdog_fires_on_every_rank_and_lens_hang_names_the_stalled_rank_and_span(self):
        # Rank 1 (not an exporting rank) stops in iteration 5's second micro-batch; an iteration takes well under
        # a second here, the watchdog waits 3.
        job = Job(self.tmp.name, ["--testing-slow-rank", "1", "--testing-stall-iteration", "5"],
                  {"MEGATRON_OTEL_HANG_TIMEOUT": "3"})
        try:
            snapshots = job.wait_for_snapshots(4, 90)
            result = lens("hang", job.run_dir)
            verdict = json.loads(lens("hang", job.run_dir, "--json").stdout)
        finally:
            job.kill()
        self.assertEqual(sorted(snapshots), [0, 1, 2, 3])
        for rank, s in snapshots.items():
            self.assertEqual((s["reason"], s["world_size"], s["exporting"]), ("watchdog", 4, rank == 3), rank)
            self.assertEqual(s["last_iteration_completed"], 4, rank)
            self.assertGreaterEqual(s["seconds_since_iteration_boundary"], 3, rank)
        stalled = innermost(snapshots[1])
        self.assertEqual((stalled["name"], stalled["group"]), ("megatron.microbatch.forward", "microbatch"))
        self.assertEqual(stalled["attributes"]["megatron.microbatch_id"], 1)
        for rank in (0, 2, 3):  # they wait for rank 1 in the gradients' all-reduce
            waiting = innermost(snapshots[rank])
            self.assertEqual(waiting["group"], "communication", (rank, waiting))
            self.assertGreater(waiting["attributes"]["lens.collective.seq"], 0)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("4 of 4 ranks wrote a snapshot (watchdog)", result.stdout)
        self.assertRegex(result.stdout, r"behind: rank 1 is in megatron.microbatch.forward \(megatron.microbatch_id 1"
                                        r"\) at iteration 5 since [\d.]+ s, and never entered ")
        self.assertRegex(result.stdout, r"ranks 0, 2, 3 wait in \S+ at iteration 5 since")
        self.assertEqual((verdict["behind"], verdict["missing"], verdict["world_size"]), ([1], [], 4))

    def test_a_rank_stopped_with_sigstop_is_named_as_the_one_without_a_snapshot(self):
        job = Job(self.tmp.name, [], {"OTEL_BSP_SCHEDULE_DELAY": "100"})
        try:
            traces = os.path.join(job.run_dir, "rank3.traces.jsonl")
            deadline = time.time() + 60
            while not (os.path.exists(traces) and "megatron.train_step" in read_text(traces)):
                self.assertLess(time.time(), deadline, "the job does not train")
                time.sleep(0.1)
            job.ranks[2].send_signal(signal.SIGSTOP)
            # The others reach the next collective and wait there: within 2 s on an idle machine; on a loaded one
            # a rank may still be computing, and is then rightly named behind. Ask again until all of them wait
            # (up to 10 times: under a second job spinning both cores, 5 were once not enough).
            for attempt in range(10):
                time.sleep(2)
                for snapshot_file in job.snapshots():
                    os.unlink(snapshot_file)
                for rank in (0, 1, 3):
                    job.ranks[rank].send_signal(signal.SIGUSR1)  # asks; the rank goes on (here: goes on waiting)
                snapshots = job.wait_for_snapshots(3, 30)
                verdict = json.loads(lens("hang", job.run_dir, "--json").stdout)
                if not verdict["behind"]:
                    break
                if attempt % 3 == 2:
                    # Stopped inside pretrain_gpt's per-iteration agreement (a collective with no span): a rank it
                    # had not yet answered waits there, one iteration short and outside a step, and is named behind
                    # whatever time passes. Let rank 2 go on a moment and stop it again elsewhere.
                    job.ranks[2].send_signal(signal.SIGCONT)
                    time.sleep(0.5)
                    job.ranks[2].send_signal(signal.SIGSTOP)
            result = lens("hang", job.run_dir)
            self.assertTrue(all(job.ranks[r].poll() is None for r in (0, 1, 3)), "SIGUSR1 must not end a rank")
        finally:
            job.kill()
        self.assertEqual(sorted(snapshots), [0, 1, 3])
        for rank, s in snapshots.items():  # each waits for rank 2 in a collective, inside a step or between two
            self.assertEqual(s["reason"], "signal")
            thread = max(s["threads"], key=lambda t: len(t["open_spans"]))
            self.assertIn("megatron.train", [span["name"] for span in thread["open_spans"]], rank)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("3 of 4 ranks wrote a snapshot (signal)", result.stdout)
        self.assertIn("rank 2: no snapshot (stopped, dead, or never got the signal): the likeliest to be behind",
                      result.stdout)
        self.assertEqual((verdict["missing"], verdict["behind"]), ([2], []))


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class HangPointsTest(TempDirTest):
    """A rank stopped at several points of a step and of evaluation, on the shape users run (pipeline 2 x data 2), by
    the trainer's own stall, which the watchdog answers on every rank. Stopped in an evaluation step's forward while the
    others sit in that evaluation, it computes inside the spans they sit in: named behind. Stopped at the start of its
    optimizer step under the `default` groups, rank 1 is where every rank is (its step, the optimizer being no position
    there; its pipeline peer waits in the gradient norm's all-reduce, which has no span): the positions cannot tell,
    and the verdict says so."""

    # point, span groups, rank 1's innermost position, the ranks named behind (rank 3 is rank 1's pipeline peer)
    POINTS = [("forward", "default", "megatron.microbatch.forward", [1]),
              ("backward", "default", "megatron.microbatch.backward", [1]),
              ("evaluate", "default", "megatron.microbatch.forward", [1]),
              ("optimizer", "all,-layer", "megatron.optimizer_step", [1, 3]),
              ("optimizer", "default", "megatron.train_step", [])]

    def test_the_stopped_rank_is_named_behind_wherever_its_position_shows_it(self):
        for point, groups, position, behind in self.POINTS:
            with self.subTest(point=point, groups=groups):
                job = Job(os.path.join(self.tmp.name, point + groups),
                          ["--pipeline-model-parallel-size", "2", "--eval-interval", "5", "--eval-iters", "2",
                           "--testing-slow-rank", "1", "--testing-stall-iteration", "5", "--testing-stall-in", point],
                          {"MEGATRON_OTEL_HANG_TIMEOUT": "3"}, groups=groups)
                try:
                    snapshots = job.wait_for_snapshots(4, 90)
                    verdict = json.loads(lens("hang", job.run_dir, "--json").stdout)
                    text = lens("hang", job.run_dir).stdout
                finally:
                    job.kill()
                self.assertEqual(innermost(snapshots[1])["name"], position, text)
                self.assertEqual(verdict["behind"], behind, text)
                if not behind:
                    self.assertIn("no rank is behind by where it is: what holds the ranks is inside the spans below",
                                  text)


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class HangSignalTest(TempDirTest):
    """`lens hang RUN_DIR --signal` under the span groups of production and of debugging: the stalled rank and its
    place in the loop are named whatever is exported, and only the run's rank processes get the signal."""

    def test_the_stalled_rank_is_named_under_default_per_step_and_all(self):
        for groups in ("default", "per_step", "all"):
            with self.subTest(groups=groups):
                self.check_stalled_rank_is_named(groups)

    def check_stalled_rank_is_named(self, groups):
        # A process that SIGUSR1 ends and whose command line says pretrain_gpt, as torchrun's does: `pkill -USR1
        # -f pretrain_gpt`, the docs' command before, ended it; --signal must not touch it.
        launcher = subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(300)", "pretrain_gpt"])
        directory = os.path.join(self.tmp.name, groups)
        job = Job(directory, ["--testing-slow-rank", "1", "--testing-stall-iteration", "5"], {}, groups=groups)
        try:
            verdict, result = None, None
            deadline = time.time() + 90
            while time.time() < deadline:  # until rank 1 has reached its stall (iteration 5, micro-batch 1)
                time.sleep(1)
                result = lens("hang", job.run_dir, "--signal", "--json")
                if result.returncode == 0:
                    verdict = json.loads(result.stdout)
                    if verdict["behind"] == [1] and verdict["groups"][-1]["iteration"] == 5:
                        break
            text = lens("hang", job.run_dir)
            alive = [r.poll() is None for r in job.ranks]
            launcher_alive = launcher.poll() is None
        finally:
            job.kill()
            launcher.kill()
            launcher.wait()
        self.assertTrue(all(alive), "the hang signal must not end a rank")
        self.assertTrue(launcher_alive, "the launcher got the signal")
        self.assertIsNotNone(verdict, result.stderr if result else "")
        self.assertEqual((verdict["behind"], verdict["missing"]), ([1], []), verdict)
        self.assertIn("rank 1 (pid", result.stderr)
        self.assertIn("SIGUSR1 sent", result.stderr)
        self.assertRegex(text.stdout, r"behind: rank 1 is in megatron.microbatch.forward \(megatron.microbatch_id 1\)"
                                      r" at iteration 5 since")
        # the others wait where the stalled rank never got: a communication span, exported or kept as a position
        self.assertRegex(text.stdout, r"ranks 0, 2, 3 wait in megatron\.\S+ at iteration 5")


@contextlib.contextmanager
def sleeping_victim():
    """A process that SIGUSR1 would end, and what a record of it says of it: (process, pid, boot id, start ticks).
    Killed at the end of the block."""
    victim = subprocess.Popen(["/usr/bin/sleep", "300"])
    try:
        with open(f"/proc/{victim.pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        yield victim, victim.pid, boot, ticks
    finally:
        victim.kill()
        victim.wait()


class HangSignalRecordsTest(TempDirTest):
    """What --signal does with records that name a process it must not signal."""

    def test_a_record_naming_another_process_or_no_process_is_not_signalled(self):
        with sleeping_victim() as (victim, pid, boot, ticks):
            base = {"lens_rank_process": 1, "host": "h", "run_id": "r", "comm": "sleep", "hang_signal": "SIGUSR1"}
            records = {
                0: {"pid": pid, "boot_id": boot, "start_ticks": ticks + 1},  # its pid, reused since
                1: {"pid": -1, "boot_id": boot, "start_ticks": 0},  # kill(-1) would signal everything
                2: {"pid": 0, "boot_id": boot, "start_ticks": 0},  # kill(0): this process group
                3: {"pid": pid, "boot_id": "another-host", "start_ticks": ticks},
                4: {"pid": pid, "boot_id": boot, "start_ticks": ticks, "hang_signal": "none"},
                5: {"pid": pid, "boot_id": boot, "start_ticks": ticks, "comm": "bash"},
                7: {"pid": pid, "boot_id": boot, "start_ticks": ticks, "pid_namespace": 1},  # a container's
            }
            for rank, fields in records.items():
                with open(os.path.join(self.tmp.name, f"rank{rank}.process.json"), "w") as f:
                    json.dump({**base, "rank": rank, **fields}, f)
            with open(os.path.join(self.tmp.name, "rank6.process.json"), "w") as f:
                f.write("not json")
            result = lens("hang", self.tmp.name, "--signal")
            self.assertIsNone(victim.poll(), "a process the records do not name was signalled")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("rank 0 has ended", result.stderr)
        self.assertIn("rank 1 has a record naming pid -1: not signalled", result.stderr)
        self.assertIn("rank 2 has a record naming pid 0: not signalled", result.stderr)
        self.assertIn("rank 3 on another host (h)", result.stderr)
        self.assertIn("rank 4 runs with no hang signal", result.stderr)
        self.assertIn("rank 5 has ended", result.stderr)
        self.assertIn("rank6.process.json is not a rank process record", result.stderr)
        self.assertIn("rank 7 runs in another PID namespace (a container?)", result.stderr)
        self.assertIn("no rank process of this run on this host was signalled", result.stderr)

    def test_a_record_another_user_could_have_written_never_signals(self):
        with sleeping_victim() as (victim, pid, boot, ticks):
            record = {"lens_rank_process": 1, "host": "h", "run_id": "r", "pid": pid, "boot_id": boot,
                      "start_ticks": ticks, "comm": "sleep", "uid": os.getuid(), "hang_signal": "SIGUSR1"}
            nobody = 65534
            planted = {  # rank: (directory mode, file mode, what differs, the owner of the file)
                0: (0o777, 0o600, {}, None),  # a directory anyone may write in
                1: (0o755, 0o666, {}, None),  # a record anyone may rewrite
                2: (0o755, 0o600, {"uid": None}, None),  # an older lens's record: no uid
            }
            if os.getuid() == 0:  # records planted by `nobody`, naming a process of root's
                planted[3] = (0o755, 0o600, {"uid": nobody}, nobody)
                planted[4] = (0o755, 0o600, {}, nobody)  # says root's uid, but nobody wrote it
            directories = []
            for rank, (dir_mode, file_mode, fields, owner) in planted.items():
                directory = os.path.join(self.tmp.name, f"planted{rank}")
                os.makedirs(directory)
                os.chmod(directory, dir_mode)
                path = os.path.join(directory, f"rank{rank}.process.json")
                with open(path, "w") as f:
                    json.dump({k: v for k, v in {**record, "rank": rank, **fields}.items() if v is not None}, f)
                os.chmod(path, file_mode)
                if owner is not None:
                    os.chown(path, owner, owner)
                directories.append(directory)
            result = lens("hang", *directories, "--signal")
            self.assertIsNone(victim.poll(), "a process was signalled on a record another user could have written")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("rank 0 is not signalled: its record's directory is writable by other users", result.stderr)
        self.assertIn("rank 1 is not signalled: its record is writable by other users", result.stderr)
        self.assertIn("rank 2 is not signalled: its record says no uid", result.stderr)
        if os.getuid() == 0:
            self.assertIn("rank 3 is not signalled: its process runs as uid 0, not as its record's owner (uid 65534)",
                          result.stderr)
            self.assertIn("rank 4 is not signalled: its record says uid 0 but belongs to uid 65534", result.stderr)

    def test_no_record_is_a_clear_error(self):
        result = lens("hang", self.tmp.name, "--signal")
        self.assertEqual(result.returncode, 2)
        self.assertIn("no rank<R>.process.json under", result.stderr)


def snapshot(rank, world_size, iteration, spans, written=1_800_000_000.0, reason="signal"):
    """A snapshot as a rank writes it; spans: (name, group, attributes), outermost first, on one thread."""
    return {"lens_hang_snapshot": 1, "rank": rank, "world_size": world_size, "pid": 100 + rank, "host": "h",
            "run_id": "r", "reason": reason, "exporting": rank == world_size - 1, "hang_timeout_seconds": 0,
            "written_unix_nano": int(written * 1e9), "last_iteration_completed": iteration - 1,
            "seconds_since_iteration_boundary": 40.0,
            "threads": [{"tid": 100 + rank, "name": "python3", "open_spans": [
                {"name": n, "group": g, "start_unix_nano": 0, "open_seconds": 40.0 - i, "trace_id": "0" * 32,
                 "span_id": f"{i + 1:016x}", "parent_span_id": None if i == 0 else f"{i:016x}", "attributes": a}
                for i, (n, g, a) in enumerate(spans)]},
                        {"tid": 200 + rank, "name": "lens-export", "open_spans": []}]}


STEP = ("megatron.train_step", "step", {"megatron.iteration": 10})
WAIT = ("megatron.grad_sync.finish", "communication", {"lens.collective.seq": 41})


class HangVerdictTest(TempDirTest):
    """The verdict on snapshots with known answers."""

    def write(self, *snapshots):
        for s in snapshots:
            with open(os.path.join(self.tmp.name, f"rank{s['rank']}.snapshot.json"), "w") as f:
                json.dump(s, f)

    def verdict(self):
        text, as_json = lens("hang", self.tmp.name), lens("hang", self.tmp.name, "--json")
        self.assertEqual((text.returncode, as_json.returncode), (0, 0), text.stderr + as_json.stderr)
        return text.stdout, json.loads(as_json.stdout)

    def test_a_rank_at_a_lower_iteration_is_behind_and_missing_and_stale_ones_are_named(self):
        self.write(snapshot(0, 5, 10, [STEP, WAIT]), snapshot(1, 5, 10, [STEP, WAIT]),
                   snapshot(2, 5, 9, [("megatron.train_step", "step", {}),
                                      ("megatron.optimizer.step", "optimizer", {})]),
                   snapshot(3, 5, 10, [STEP, WAIT], written=1_800_000_000.0 - 500))
        text, v = self.verdict()
        self.assertEqual((v["behind"], v["missing"], v["stale"], v["world_size"]), ([2], [4], [3], 5))
        self.assertIn("4 of 5 ranks wrote a snapshot (signal)", text)
        self.assertIn("behind: rank 2 is in megatron.optimizer.step at iteration 9 since 39 s, and never entered "
                      "megatron.grad_sync.finish", text)
        self.assertIn("ranks 0, 1, 3 wait in megatron.grad_sync.finish at iteration 10 since 39 s", text)
        self.assertIn("rank 4: no snapshot (stopped, dead, or never got the signal)\n", text)
        self.assertIn("rank 3's snapshot is 500 s older than the newest", text)

    def test_every_rank_in_the_same_place_names_nobody(self):
        self.write(*[snapshot(r, 3, 10, [STEP, WAIT]) for r in range(3)])
        text, v = self.verdict()
        self.assertEqual((v["behind"], v["missing"]), ([], []))
        self.assertIn("no rank is behind by where it is", text)
        self.assertIn("  ranks 0-2 wait in megatron.grad_sync.finish at iteration 10 since 39 s\n", text)

    def test_newest_run_directory_is_read_when_given_the_directory_above(self):
        os.makedirs(os.path.join(self.tmp.name, "old-run"))
        os.makedirs(os.path.join(self.tmp.name, "new-run"))
        with open(os.path.join(self.tmp.name, "old-run", "rank0.snapshot.json"), "w") as f:
            json.dump(snapshot(0, 1, 3, [STEP]), f)
        time.sleep(0.05)
        with open(os.path.join(self.tmp.name, "new-run", "rank0.snapshot.json"), "w") as f:
            json.dump(snapshot(0, 1, 7, [STEP]), f)
        v = json.loads(lens("hang", self.tmp.name, "--json").stdout)
        self.assertTrue(v["run_dir"].endswith("new-run"), v)
        self.assertEqual(v["groups"][0]["iteration"], 7)


class HangNodesTest(TempDirTest):
    """One directory per node (each node writes its ranks' snapshots on its own disk): judged together; a node's
    directory missing names its ranks as without a snapshot; two runs' snapshots are refused."""

    def write_node(self, node, *snapshots):
        directory = os.path.join(self.tmp.name, node, "telemetry", "r")
        os.makedirs(directory, exist_ok=True)
        for s in snapshots:
            with open(os.path.join(directory, f"rank{s['rank']}.snapshot.json"), "w") as f:
                json.dump(s, f)
        return directory

    def test_two_nodes_directories_are_one_verdict(self):
        node0 = self.write_node("node0", snapshot(0, 4, 10, [STEP, WAIT]), snapshot(1, 4, 10, [STEP, WAIT]))
        node1 = self.write_node("node1", snapshot(2, 4, 10, [STEP, WAIT]),
                                snapshot(3, 4, 10, [STEP, ("megatron.microbatch.forward", "microbatch", {})]))
        result = lens("hang", node0, node1, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        v = json.loads(result.stdout)
        self.assertEqual((v["behind"], v["missing"], v["run_dirs"]), ([3], [], [node0, node1]))
        text = lens("hang", node0, node1).stdout
        self.assertIn(f"4 of 4 ranks wrote a snapshot (signal), within 0.0 s, in {node0} and {node1}", text)

    def test_signal_over_two_nodes_directories_signals_each_rank_and_judges_them_together(self):
        # Two stand-in ranks, one per node's directory, each writing its snapshot when SIGUSR1 comes (as lens's
        # handler has its hang thread do).
        victims, node_dirs = [], []
        handler = ("import os, signal, sys, time\n"
                   "def snap(*_): os.replace(sys.argv[1] + '.pending', sys.argv[1])\n"
                   "signal.signal(signal.SIGUSR1, snap)\nprint('ready', flush=True)\ntime.sleep(60)\n")
        try:
            for node, (rank, spans) in enumerate([(0, [STEP, WAIT]),
                                                  (1, [STEP, ("megatron.microbatch.forward", "microbatch", {})])]):
                directory = self.write_node(f"node{node}")
                path = os.path.join(directory, f"rank{rank}.snapshot.json")
                with open(path + ".pending", "w") as f:
                    json.dump(snapshot(rank, 2, 10, spans, written=time.time() + 60), f)
                victim = subprocess.Popen([sys.executable, "-c", handler, path], stdout=subprocess.PIPE, text=True)
                victims.append(victim)
                self.assertEqual(victim.stdout.readline().strip(), "ready")
                with open(f"/proc/{victim.pid}/stat") as f:
                    ticks = int(f.read().rsplit(")", 1)[1].split()[19])
                with open(f"/proc/{victim.pid}/comm") as f:
                    comm = f.read().strip()
                with open("/proc/sys/kernel/random/boot_id") as f:
                    boot = f.read().strip()
                with open(os.path.join(directory, f"rank{rank}.process.json"), "w") as f:
                    json.dump({"lens_rank_process": 1, "rank": rank, "pid": victim.pid, "host": "h", "run_id": "r",
                               "boot_id": boot, "start_ticks": ticks, "comm": comm, "uid": os.getuid(),
                               "hang_signal": "SIGUSR1"}, f)
                node_dirs.append(directory)
            result = lens("hang", *node_dirs, "--signal", "--json")
        finally:
            for victim in victims:
                victim.kill()
                victim.wait()
        self.assertEqual(result.returncode, 0, result.stderr)
        for rank, victim in enumerate(victims):
            self.assertIn(f"rank {rank} (pid {victim.pid}): SIGUSR1 sent", result.stderr)
        v = json.loads(result.stdout)
        self.assertEqual((v["behind"], v["missing"], v["run_dirs"]), ([1], [], node_dirs))

    def test_a_nodes_directory_missing_names_its_ranks_as_without_a_snapshot(self):
        node0 = self.write_node("node0", snapshot(0, 4, 10, [STEP, WAIT]), snapshot(1, 4, 10, [STEP, WAIT]))
        gone = os.path.join(self.tmp.name, "node1", "telemetry", "r")
        result = lens("hang", node0, gone)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"lens hang: {gone}: no such directory", result.stderr)
        self.assertIn("ranks 2, 3: no snapshot (stopped, dead, or never got the signal): the likeliest to be behind",
                      result.stdout)

    def test_snapshots_of_two_runs_are_refused_naming_both(self):
        other = snapshot(2, 4, 10, [STEP, WAIT])
        other["run_id"] = "another-run"
        node0 = self.write_node("node0", snapshot(0, 4, 10, [STEP, WAIT]))
        node1 = self.write_node("node1", other)
        result = lens("hang", node0, node1)
        self.assertEqual(result.returncode, 2)
        self.assertIn("snapshots of 2 runs (another-run, r)", result.stderr)
        self.assertEqual(result.stdout, "")


class HangInputTest(TempDirTest):
    def test_no_snapshot_and_a_broken_one_are_clear_errors(self):
        nothing = lens("hang", self.tmp.name)
        self.assertEqual(nothing.returncode, 2)
        self.assertIn("no rank<R>.snapshot.json under", nothing.stderr)
        with open(os.path.join(self.tmp.name, "rank0.snapshot.json"), "w") as f:
            f.write('{"lens_hang_snapshot": 1, "rank": 0, "world_')  # cut short
        broken = lens("hang", self.tmp.name)
        self.assertEqual(broken.returncode, 2)
        self.assertIn("rank0.snapshot.json is not a hang snapshot", broken.stderr)
        self.assertNotIn("Traceback", broken.stderr)


if __name__ == "__main__":
    unittest.main()
