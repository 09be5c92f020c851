"""`lens ctl` on a running pretrain_gpt job of 4 ranks (processes launched by hand, as torchrun would): a change of
span groups is applied by every rank at the same iteration, within two iterations of the request; `--for 5` gives
exactly five iterations; a wrong token, no token, a bad spec and a second change while one is pending are refused
with nothing changed; a rank that does not export never emits; `lens report` marks the change. Run alone (ctest
RUN_SERIAL): it paces a job."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

from lens_report_test import TempDirTest, lens

TRAINER = os.environ.get("LENS_PRETRAIN_GPT")
# Each iteration takes 2 x 40 ms or more on every rank (rank 0 sleeps in its micro-batches, the others wait for it):
# slow enough to ask between two boundaries, fast enough for a short test.
FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "100000", "--log-interval", "1000",
         "--testing-slow-rank", "0", "--testing-slow-ms", "40", "--otel-enabled"]


class Job:
    """pretrain_gpt on 4 ranks with the control endpoint on; stopped with SIGTERM (a clean stop)."""

    def __init__(self, directory, strategy="all_ranks", extra_env=None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        self.telemetry = os.path.join(directory, "telemetry")
        env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "4",
               "MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": self.telemetry,
               "MEGATRON_OTEL_RANK_STRATEGY": strategy, "MEGATRON_OTEL_CONTROL": "1",
               "MEGATRON_OTEL_SPAN_GROUPS": "default", **(extra_env or {})}
        self.ranks = [subprocess.Popen([TRAINER, *FLAGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(4)]
        self.run_dir = None
        deadline = time.time() + 60
        while time.time() < deadline and self.run_dir is None:
            for root, _, files in os.walk(self.telemetry):
                if "control.json" in files:
                    self.run_dir = root
            time.sleep(0.05)
        if self.run_dir is None:
            self.stop()
            raise AssertionError("no control.json within 60 s")

    def ctl(self, *args):
        return subprocess.run([os.environ["LENS_TOOL"], "ctl", self.run_dir, *args], capture_output=True, text=True,
                              timeout=30)

    def status(self):
        result = self.ctl("status")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def wait_for_iteration(self, iteration):
        deadline = time.time() + 60
        while self.status()["iteration"] < iteration:
            assert time.time() < deadline, "the job does not get on"
            time.sleep(0.05)

    @contextlib.contextmanager
    def others_stopped(self):
        """Ranks 1-3 stopped (SIGSTOP) until the block ends: rank 0 passes at most one more iteration boundary, then
        waits for them in the all-reduce that comes before its next one. Yields once its iteration has stood still
        for 2 s, 25 times an iteration."""
        for r in self.ranks[1:]:
            r.send_signal(signal.SIGSTOP)
        try:
            seen, since = self.status()["iteration"], time.time()
            deadline = since + 30
            while time.time() - since < 2:
                assert time.time() < deadline, "rank 0 goes on with ranks 1-3 stopped"
                time.sleep(0.1)
                now = self.status()["iteration"]
                if now != seen:
                    seen, since = now, time.time()
            yield
        finally:
            for r in self.ranks[1:]:
                r.send_signal(signal.SIGCONT)

    def stop(self):
        for r in self.ranks:
            r.send_signal(signal.SIGTERM)
        outputs = [r.communicate(timeout=60)[0] for r in self.ranks]
        assert all(r.returncode == 0 for r in self.ranks), outputs
        return outputs


def thread_names(pid):
    """The names of a process's threads, as `top -H` and `ps -L` show them."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that ended since the listing
            pass
    return names


def step_iterations(run_dir):
    """Per rank, the iterations of its megatron.train_step spans, and the step spans' change events."""
    by_rank, events = {}, []
    for name in sorted(os.listdir(run_dir)):
        if not name.endswith(".traces.jsonl"):
            continue
        with open(os.path.join(run_dir, name)) as f:
            lines = f.readlines()
        for line in lines:
            for rs in json.loads(line)["resourceSpans"]:
                rank = next(int(a["value"]["intValue"]) for a in rs["resource"]["attributes"] if a["key"] == "dl.rank")
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        if s["name"] != "megatron.train_step":
                            continue
                        attrs = {a["key"]: a["value"] for a in s.get("attributes", [])}
                        iteration = int(attrs["megatron.iteration"]["intValue"])
                        by_rank.setdefault(rank, []).append(iteration)
                        events += [(rank, iteration) for e in s.get("events", [])
                                   if e["name"] == "lens.span_groups.changed"]
    return {rank: sorted(its) for rank, its in by_rank.items()}, sorted(events)


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class LiveSpanGroupsTest(TempDirTest):
    def test_every_rank_switches_at_the_same_iteration_and_refusals_change_nothing(self):
        job = Job(self.tmp.name)
        try:
            job.wait_for_iteration(3)
            before = job.status()
            self.assertEqual((before["span_groups"], before["world_size"]),
                             ("job,checkpoint,evaluate,first_iteration,inference", 4))
            # A person looking at a rank sees which threads are lens's: its export thread and its hang watch.
            for r in job.ranks:
                names = thread_names(r.pid)
                self.assertEqual((names.count("lens-export"), names.count("lens-hang")), (1, 1), names)
            # Refused, each with nothing changed: a bad spec, no token, a wrong token.
            bad = job.ctl("span-groups", "default,stepp")
            self.assertEqual(bad.returncode, 1)
            self.assertIn("unknown span group 'stepp'", bad.stderr)
            self.assertIn("did you mean 'step'", bad.stderr)
            empty = job.ctl("span-groups", "")  # turned every group off; now said as '-all'
            self.assertEqual(empty.returncode, 1, empty.stderr)
            self.assertIn("ask for '-all'", empty.stderr)
            with open(os.path.join(job.run_dir, "control.json")) as f:
                endpoint = json.load(f)
            url = f"http://127.0.0.1:{endpoint['port']}/span-groups?spec=all"
            for headers in ({}, {"Authorization": "Bearer " + "0" * 32}):
                with self.assertRaises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(urllib.request.Request(url, method="POST", headers=headers), timeout=10)
                self.assertEqual(refused.exception.code, 401)
            self.assertEqual(job.status()["span_groups"], before["span_groups"])
            self.assertIsNone(job.status()["pending"])
            # The change, and a second one while it is pending. Ranks 1-3 are stopped meanwhile, so rank 0 waits in
            # the all-reduce before its next boundary and the first change stays pending however slow the machine.
            with job.others_stopped():
                asked = job.ctl("span-groups", "per_step")
                self.assertEqual(asked.returncode, 0, asked.stderr)
                asked_after = json.loads(asked.stdout)["from_iteration_after"]
                second = job.ctl("span-groups", "all")
                self.assertEqual(second.returncode, 1, second.stdout)
                self.assertIn("pending", second.stderr)
            job.wait_for_iteration(asked_after + 6)
        finally:
            job.stop()
        steps, events = step_iterations(job.run_dir)
        self.assertEqual(sorted(steps), [0, 1, 2, 3])
        firsts = {rank: its[0] for rank, its in steps.items()}
        self.assertEqual(len(set(firsts.values())), 1, firsts)  # the same iteration on every rank
        first = firsts[0]
        self.assertLessEqual(first, asked_after + 2)  # within two iterations of the request
        for rank, its in steps.items():
            self.assertEqual(its, list(range(first, its[-1] + 1)), rank)  # every iteration from then on
        self.assertEqual(events, [(rank, first) for rank in range(4)])  # the change on the first step span
        f = json.loads(lens("report", job.run_dir, "--json").stdout)
        self.assertEqual([(c["iteration"], c["ranks"]) for c in f["span_group_changes"]], [(first, 4)])
        self.assertNotIn("megatron.layer.forward", {s["name"] for s in f["spans"]})  # the refused `all`

    def test_for_n_gives_exactly_n_iterations_and_a_non_exporting_rank_never_emits(self):
        # single_rank with EXPORT_RANK=0: rank 0 exports (and serves the endpoint), ranks 1-3 record nothing.
        job = Job(self.tmp.name, strategy="single_rank", extra_env={"MEGATRON_OTEL_EXPORT_RANK": "0"})
        try:
            job.wait_for_iteration(2)
            asked = job.ctl("span-groups", "per_step", "--for", "5")
            self.assertEqual(asked.returncode, 0, asked.stderr)
            after = json.loads(asked.stdout)["from_iteration_after"]
            job.wait_for_iteration(after + 10)
            self.assertEqual(job.status()["span_groups"], "job,checkpoint,evaluate,first_iteration,inference")
        finally:
            outputs = job.stop()
        steps, _ = step_iterations(job.run_dir)
        self.assertEqual(list(steps), [0])
        self.assertEqual(len(steps[0]), 5, steps)
        self.assertEqual(steps[0], list(range(steps[0][0], steps[0][0] + 5)))
        self.assertEqual(sorted(n for n in os.listdir(job.run_dir) if n.endswith(".jsonl")),
                         ["rank0.metrics.jsonl", "rank0.traces.jsonl"])
        for rank in (1, 2, 3):  # every rank applied it at the same iteration as rank 0; they export nothing, and the
            # set only decides which open spans a hang snapshot of theirs shows (they keep positions, CONTRACT §3)
            self.assertIn(f"span groups changed at iteration {steps[0][0]}: ", outputs[rank])
            self.assertIn("(for 5 iterations)", outputs[rank])
        f = json.loads(lens("report", job.run_dir, "--json").stdout)
        self.assertEqual([(c["iteration"], c["for_iterations"]) for c in f["span_group_changes"]], [(steps[0][0], 5)])


def raw_request(port, data, hold=0.0):
    """Sends bytes as they are and returns what comes back first ('' when the connection is closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        time.sleep(hold)
        try:
            return s.recv(200).decode("latin-1")
        except (ConnectionResetError, socket.timeout):
            return ""


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the C++ trainer (set by ctest)")
class ControlEndpointAbuseTest(TempDirTest):
    def test_a_flood_and_malformed_requests_during_training_change_nothing_and_stop_nothing(self):
        job = Job(self.tmp.name)
        try:
            job.wait_for_iteration(2)
            with open(os.path.join(job.run_dir, "control.json")) as f:
                endpoint = json.load(f)
            port, token = endpoint["port"], endpoint["token"]
            before = job.status()
            # Malformed: garbage, a header line of 64 KiB, a body of 1 MiB on the change, an unknown method, a path
            # that does not exist, a request left half sent.
            garbage = raw_request(port, b"\x00\xff\x16\x03\x01 not http at all\r\n\r\n")
            self.assertFalse(garbage.startswith("HTTP/1.1 2"), garbage)
            huge_header = raw_request(port, b"GET /status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
            self.assertFalse(huge_header.startswith("HTTP/1.1 2"), huge_header)
            body = raw_request(port, b"POST /span-groups?spec=all HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                               token.encode() + b"\r\nContent-Length: 1048576\r\n\r\n" + b"x" * 65536)
            self.assertFalse(body.startswith("HTTP/1.1 2"), body)
            unknown = raw_request(port, b"DELETE /span-groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                  token.encode() + b"\r\n\r\n")
            self.assertRegex(unknown, r"^HTTP/1.1 4\d\d")
            missing = raw_request(port, b"GET /nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                                  b"\r\n\r\n")
            self.assertTrue(missing.startswith("HTTP/1.1 404"), missing)
            half_open = socket.create_connection(("127.0.0.1", port), timeout=10)
            half_open.sendall(b"GET /status HTTP/1.1\r\nHost:")
            # A flood: 4 threads asking /status as fast as they can, while the job trains. The endpoint answers 20 a
            # second (a burst of 40) and the rest 429 at once. The flood lasts at least 3 s and until it has asked
            # 100 more than the budget allows for its own measured length, so the bounds below hold on a loaded
            # machine as on a fast one: they come from this flood's length, not from a length it was meant to have.
            asked, served, limited, stop = [0] * 4, [0] * 4, [0] * 4, threading.Event()

            def hammer(i):
                while not stop.is_set():
                    asked[i] += 1
                    request = urllib.request.Request(f"http://127.0.0.1:{port}/status",
                                                     headers={"Authorization": "Bearer " + token})
                    try:
                        with urllib.request.urlopen(request, timeout=10) as response:
                            served[i] += response.status == 200
                    except urllib.error.HTTPError as e:
                        limited[i] += e.code == 429
            threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
            start_iteration = job.status()["iteration"]
            started = time.monotonic()

            def budget():  # what the endpoint may serve in the flood so far: the burst and 20 a second
                return 40 + 20 * (time.monotonic() - started)
            for t in threads:
                t.start()
            give_up = started + 60
            outran = False
            while time.monotonic() < give_up and not outran:
                time.sleep(0.1)
                outran = time.monotonic() - started >= 3 and sum(served) + sum(limited) >= budget() + 100
            stop.set()
            for t in threads:
                t.join()
            allowed = budget()  # measured after the last request in flight has its answer
            half_open.close()
            time.sleep(0.5)  # the budget fills again
            after = job.status()
            self.assertTrue(outran, f"in 60 s the flood never asked 100 more than the budget: {served} {limited}")
            self.assertEqual(sum(served) + sum(limited), sum(asked), "every request is answered 200 or 429")
            self.assertGreater(sum(served), 40, served)  # the burst, and more as the budget fills
            self.assertLessEqual(sum(served), allowed + 1, (served, allowed))  # the budget at most; the rest 429
            self.assertGreater(after["iteration"], start_iteration, "the job stopped training during the flood")
            self.assertEqual((after["span_groups"], after["pending"]), (before["span_groups"], None))
        finally:
            outputs = job.stop()  # every rank stops cleanly (exit 0)
        steps, _ = step_iterations(job.run_dir)
        self.assertEqual(steps, {}, "the refused `all` changed nothing: the default records no step span")
        self.assertTrue(all("span groups changed" not in o for o in outputs))


if __name__ == "__main__":
    unittest.main()
