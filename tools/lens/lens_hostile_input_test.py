"""The tools under hostile input: every run of `lens` here has a memory cap (RLIMIT_AS) and a time cap,
so an unbounded allocation, a crash or a hang is a failed test, not a dead machine. Files that claim huge numbers
(parallel sizes whose product overflows, an iteration of 2x10^7, a world of 10^8 ranks), a NaN loss, a line longer
than any batch, telemetry beside files that are not telemetry, spans that fit no step, and a disk that fills."""

import gzip
import json
import os
import resource
import http.server
import signal
import subprocess
import threading
import time
import unittest

from lens_hang_test import snapshot
from lens_report_test import LENS, TempDirTest, attr, span, spans_line

MEMORY_CAP = 768 << 20


def capped(memory=MEMORY_CAP, file_size=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if file_size is not None:  # a disk that fills: writes past it fail with EFBIG instead of a signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return limit


def lens_capped(*args, timeout=60, **cap):
    return subprocess.run([LENS, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=capped(**cap))


def step_spans(iterations, loss=None):
    return [span("megatron.train_step", 1000 * i, 100, megatron_iteration=i,
                 **({"megatron_loss": loss(i)} if loss else {})) for i in iterations]


def write_lines(path, lines, opener=open):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with opener(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


class HostileRunFilesTest(TempDirTest):
    def run_dir(self):
        return os.path.join(self.tmp.name, "run")

    def test_parallel_sizes_whose_product_overflows(self):
        line = json.loads(spans_line(3, step_spans(range(1, 4))))
        line["resourceSpans"][0]["resource"]["attributes"] += [
            attr("dl.tensor_parallel.size", 65536), attr("dl.data_parallel.size", 65536),
            attr("dl.pipeline_parallel.size", 2)]
        write_lines(os.path.join(self.run_dir(), "rank3.traces.jsonl"), [json.dumps(line)])
        for args in (["report", self.run_dir()], ["report", "--json", self.run_dir()],
                     ["convert", self.run_dir(), "--to", "chrome-json", "-o", os.path.join(self.tmp.name, "t.json")]):
            with self.subTest(args=args[0:2]):
                result = lens_capped(*args)
                self.assertEqual(result.returncode, 0, result.stderr)

    def test_integer_resource_keys_sent_as_strings_keep_the_ranks_apart(self):
        """An SDK fed from os.environ sends dl.rank as a string: it is read as the number it says, not as 0."""
        for rank in range(4):
            line = json.loads(spans_line(rank, step_spans(range(1, 4)), world=4))
            for a in line["resourceSpans"][0]["resource"]["attributes"]:
                if "intValue" in a["value"]:
                    a["value"] = {"stringValue": a["value"]["intValue"]}
            write_lines(os.path.join(self.run_dir(), f"rank{rank}.traces.jsonl"), [json.dumps(line)])
        result = lens_capped("report", "--json", self.run_dir())
        self.assertEqual(result.returncode, 0, result.stderr)
        figures = json.loads(result.stdout)
        self.assertEqual(figures["run"]["ranks"], [0, 1, 2, 3])
        self.assertEqual((figures["run"]["world_size"], [s["ranks"] for s in figures["steps"]]), (4, [4, 4, 4]))

    def test_a_nan_loss_is_read_as_such_and_the_rest_of_its_line_too(self):
        lines = [spans_line(0, step_spans(range(1, 101), loss=lambda i: 3.0 - i / 100))]
        lines[0] = lines[0].replace('{"doubleValue": 2.5}', '{"doubleValue": "NaN"}')
        self.assertIn('"NaN"', lines[0])
        write_lines(os.path.join(self.run_dir(), "rank0.traces.jsonl"), lines)
        result = lens_capped("report", "--json", self.run_dir())
        self.assertEqual(result.returncode, 0, result.stderr)
        figures = json.loads(result.stdout)
        self.assertEqual(len(figures["steps"]), 100)
        self.assertEqual(figures["read"]["problems"], [])
        loss = {entry["iteration"]: entry["loss"] for entry in figures["loss"]}
        self.assertIsNone(loss[50])
        self.assertAlmostEqual(loss[51], 2.49)
        text = lens_capped("report", self.run_dir())
        self.assertEqual(text.returncode, 0, text.stderr)

    def test_an_iteration_of_twenty_million_costs_what_one_step_costs(self):
        write_lines(os.path.join(self.run_dir(), "rank0.traces.jsonl"),
                    [spans_line(0, step_spans([1, 2, 20_000_000]))])
        result = lens_capped("report", "--json", self.run_dir(), memory=256 << 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([s["iteration"] for s in json.loads(result.stdout)["steps"]], [1, 2, 20_000_000])

    def test_a_line_longer_than_the_cap_is_a_problem_not_memory(self):
        good = os.path.join(self.run_dir(), "rank0.traces.jsonl")
        write_lines(good, [spans_line(0, step_spans(range(1, 4)))])
        with gzip.open(os.path.join(self.run_dir(), "rank1.traces.jsonl.gz"), "wb", compresslevel=9) as f:
            f.write(b'{"resourceSpans": [{"x": "' + b"a" * (70 << 20) + b'"}]}\n')
            f.write(spans_line(1, step_spans(range(1, 4))).encode() + b"\n")
        result = lens_capped("report", "--json", self.run_dir(), memory=512 << 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        figures = json.loads(result.stdout)
        self.assertEqual([(p["line"], p["what"][:32]) for p in figures["read"]["problems"]],
                         [(1, "a line longer than 64 MiB: not r")])
        self.assertEqual([s["ranks"] for s in figures["steps"]], [2, 2, 2], "the line after it is read")

    def test_snapshots_control_json_and_a_chrome_trace_are_not_read_as_telemetry(self):
        write_lines(os.path.join(self.run_dir(), "rank0.traces.jsonl"), [spans_line(0, step_spans(range(1, 4)))])
        trace = os.path.join(self.run_dir(), "trace.json")
        self.assertEqual(lens_capped("convert", self.run_dir(), "--to", "chrome-json", "-o", trace).returncode, 0)
        with open(os.path.join(self.run_dir(), "rank0.snapshot.json"), "w") as f:
            json.dump({"lens_hang_snapshot": 1, "rank": 0, "world_size": 1, "threads": []}, f, indent=1)
        with open(os.path.join(self.run_dir(), "control.json"), "w") as f:
            json.dump({"port": 1, "token": "x"}, f, indent=1)
        collector = json.loads(spans_line(1, step_spans(range(1, 4))))
        with open(os.path.join(self.run_dir(), "otelcol.json"), "w") as f:  # a Collector's file named .json is read
            f.write(json.dumps(collector) + "\n")
        result = lens_capped("report", "--json", "--fail-if", "problems", self.run_dir())
        self.assertEqual(result.returncode, 0, result.stdout[-2000:] + result.stderr)
        figures = json.loads(result.stdout)
        self.assertEqual(figures["read"]["files"], 2)
        self.assertEqual([s["ranks"] for s in figures["steps"]], [2, 2, 2])

    def test_distinct_span_names_past_the_limit_are_counted_under_one(self):
        names = 150_000  # without the limit: about 280 MB
        spans = [span(f"name.{i}", 1000 + i, 0.1) for i in range(names)]
        write_lines(os.path.join(self.run_dir(), "rank0.traces.jsonl"),
                    [spans_line(0, spans[k:k + 512]) for k in range(0, len(spans), 512)])
        # Thread stacks count in the limit: a machine of 16 or more cores filled it with the default (a thread a core).
        for threads in ([], ["--threads", "64"]):
            with self.subTest(threads=threads):
                result = lens_capped("report", "--json", *threads, self.run_dir(), memory=160 << 20)
                self.assertEqual(result.returncode, 0, result.stderr[-500:])
                figures = json.loads(result.stdout)
                self.assertEqual(len(figures["spans"]), 10_001)
                self.assertEqual(figures["read"]["spans_of_other_names"], names - 10_000)
                self.assertEqual({s["name"]: s["count"] for s in figures["spans"]}["(other span names)"],
                                 names - 10_000)

    def test_spans_that_fit_no_step_cost_linear_time(self):
        steps = 50_000
        # Written first, and after every step in time: they wait for a step that never comes.
        spans = [span("megatron.microbatch.forward", 1000 * (steps + 10) + i, 0.5) for i in range(steps)]
        spans += [span("megatron.train_step", 1000 * i, 100, megatron_iteration=i) for i in range(1, steps + 1)]
        write_lines(os.path.join(self.run_dir(), "rank0.traces.jsonl"),
                    [spans_line(0, spans[k:k + 512]) for k in range(0, len(spans), 512)])
        # Linear: under a second here; quadratic (each step looked at every waiting span): 28 s.
        result = lens_capped("report", "--json", self.run_dir(), timeout=15)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(json.loads(result.stdout)["steps"]), steps)


class TerminalEscapesTest(TempDirTest):
    """Span names and details from files reach a terminal: their control bytes are written as \\xNN."""

    def test_report_and_hang_print_no_raw_escape(self):
        evil = "megatron.train_step\x1b[2J\x1b]0;owned\x07"
        run = os.path.join(self.tmp.name, "run")
        write_lines(os.path.join(run, "rank0.traces.jsonl"),
                    [spans_line(0, step_spans(range(1, 4)) + [span(evil, 5000, 10)])])
        with open(os.path.join(run, "rank0.snapshot.json"), "w") as f:
            json.dump(snapshot(0, 2, 3, [("megatron.train_step", "step", {}), (evil, "step", {})]), f)
        for args in (["report", run], ["hang", run]):
            with self.subTest(command=args[0]):
                result = lens_capped(*args)
                self.assertIn(result.returncode, (0,), result.stderr)
                self.assertNotIn("\x1b", result.stdout)
                self.assertNotIn("\x07", result.stdout)
                self.assertIn("\\x1b[2J", result.stdout)

    def test_run_ids_options_and_bidi_characters_reach_no_terminal_raw(self):
        # Raw terminal bytes came through from --run, from run ids in files and from CLI11's echo of an invalid
        # --fail-if; U+202E in a span name reversed what followed it on the screen.
        run = os.path.join(self.tmp.name, "runs")
        write_lines(os.path.join(run, "a", "rank0.traces.jsonl"),
                    [spans_line(0, step_spans(range(1, 4)), run_id="run\x1b[2Ja")])
        write_lines(os.path.join(run, "b", "rank0.traces.jsonl"),
                    [spans_line(0, step_spans(range(1, 4)) + [span("megatron.\u202eptts", 5000, 10)],
                                run_id="run-b")])
        cases = {"run ids from files": ["report", run],
                 "--run": ["report", run, "--run", "x\x1b]0;owned\x07"],
                 "--fail-if": ["report", run, "--run", "run-b", "--fail-if", "straggler\x1b[2J"],
                 "a span name": ["report", run, "--run", "run-b"]}
        for case, args in cases.items():
            with self.subTest(case=case):
                result = lens_capped(*args)
                for stream in (result.stdout, result.stderr):
                    for raw in ("\x1b", "\x07", "\u202e"):
                        self.assertNotIn(raw, stream)
        self.assertIn("\\u202eptts", lens_capped(*cases["a span name"]).stdout)
        self.assertIn("\\x1b[2J", lens_capped(*cases["--fail-if"]).stderr)


class FailIfTest(TempDirTest):
    def test_a_bound_that_is_no_number_of_at_least_zero_is_refused(self):
        # A bound that is no number (dropped>nan) would never hold: it is malformed.
        run = os.path.join(self.tmp.name, "run")
        write_lines(os.path.join(run, "rank0.traces.jsonl"), [spans_line(0, step_spans(range(1, 4)))])
        for condition in ("dropped>nan", "dropped>inf", "dropped>-1", "bubble>nan", "bubble-excess>1e400"):
            with self.subTest(condition=condition):
                result = lens_capped("report", run, "--fail-if", condition)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("a number of at least 0", result.stderr)
        self.assertEqual(lens_capped("report", run, "--fail-if", "dropped>0").returncode, 0)

    def test_the_help_states_the_straggler_rule_the_report_applies(self):
        text = lens_capped("report", "--help").stdout
        self.assertNotIn("z-score", text)
        self.assertIn("1.3x its peers' (the ranks of its stage at its tensor-parallel position)", text)


class HostileSnapshotsTest(TempDirTest):
    def snapshot(self, rank, world_size):
        path = os.path.join(self.tmp.name, "run", f"rank{rank}.snapshot.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(snapshot(rank, world_size, 3, [("megatron.train_step", "step", {})]), f)
        return os.path.dirname(path)

    def test_numbers_out_of_an_integers_range_are_refused_not_converted(self):
        # Found by the readers fuzzer: written_unix_nano of 1.8e21 must not reach an integer conversion (undefined
        # behaviour under UBSan); floats and values past int64 in integer fields likewise.
        for key, value in (("written_unix_nano", 1.8e21), ("rank", 1.5e19), ("world_size", 2.5),
                           ("last_iteration_completed", 9223372036854775807)):
            with self.subTest(key=key):
                path = os.path.join(self.tmp.name, key, "rank0.snapshot.json")
                os.makedirs(os.path.dirname(path))
                s = snapshot(0, 1, 3, [("megatron.train_step", "step", {})])
                s[key] = value
                with open(path, "w") as f:
                    json.dump(s, f)
                result = lens_capped("hang", "--json", os.path.dirname(path), memory=256 << 20)
                if key == "written_unix_nano" or key == "last_iteration_completed":
                    self.assertEqual(result.returncode, 0, result.stderr)  # read as a double / kept in range
                else:
                    self.assertEqual(result.returncode, 2, result.stderr)
                    self.assertIn("is not a hang snapshot", result.stderr)

    def test_a_world_of_a_hundred_million_ranks_is_refused_not_allocated(self):
        run = self.snapshot(0, 100_000_000)
        self.assertLess(os.path.getsize(os.path.join(run, "rank0.snapshot.json")), 1000)
        result = lens_capped("hang", "--json", run, memory=256 << 20)
        self.assertEqual(result.returncode, 2, result.stdout[-500:])
        self.assertIn("world_size 100000000 is outside", result.stderr)

    def test_a_million_missing_ranks_are_ranges(self):
        run = self.snapshot(5, 1 << 20)
        result = lens_capped("hang", "--json", run, memory=256 << 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        verdict = json.loads(result.stdout)
        self.assertEqual((verdict["missing_count"], len(verdict["missing"])), ((1 << 20) - 1, 10_000))
        text = lens_capped("hang", run, memory=256 << 20)
        self.assertIn(f"ranks 0-4, 6-{(1 << 20) - 1}: no snapshot", text.stdout)


class EndlessAnswer(http.server.BaseHTTPRequestHandler):
    """Answers 200 and then a body that never ends (until the client goes away)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        chunk = b"x" * 65536
        try:
            while True:
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


class EndlessHeaders(http.server.BaseHTTPRequestHandler):
    """Answers with a status line and then header lines for ever, as fast as they go."""

    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Again: " + b"h" * 100 + b"\r\n"
        try:
            while True:
                self.wfile.write(line * 64)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


class TrickledHeaders(EndlessHeaders):
    """Answers with a header a byte every 2 s: each read finds a byte, so only a deadline on the whole answer ends
    it."""

    def do_GET(self):
        try:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"s" * 1000:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(2)
        except (BrokenPipeError, ConnectionResetError):
            pass


class HostileControlTest(TempDirTest):
    def control_file(self, **fields):
        run = os.path.join(self.tmp.name, "run")
        os.makedirs(run, exist_ok=True)
        with open(os.path.join(run, "control.json"), "w") as f:
            json.dump({"address": "127.0.0.1", "port": 9, "token": "t0ken", "pid": 1, **fields}, f)
        return run

    def test_an_endless_answer_is_given_up_bounded(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndlessAnswer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            run = self.control_file(port=server.server_address[1])
            result = lens_capped("ctl", run, "status", memory=256 << 20, timeout=60)
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("gave up on the answer", result.stderr)

    def test_endless_or_trickled_headers_are_given_up_within_the_deadline_and_the_cap(self):
        for handler in (EndlessHeaders, TrickledHeaders):
            with self.subTest(handler=handler.__name__):
                server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
                server.daemon_threads = True
                threading.Thread(target=server.serve_forever, daemon=True).start()
                try:
                    run = self.control_file(port=server.server_address[1])
                    started = time.monotonic()
                    result = lens_capped("ctl", run, "status", memory=256 << 20, timeout=60)
                    took = time.monotonic() - started
                finally:
                    server.shutdown()
                    server.server_close()
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("gave up on the answer", result.stderr)
                # The 15 s deadline covers the headers (the trickle would otherwise last 2,000 s); the margin is
                # the process's start and exit on a loaded machine.
                self.assertLess(took, 40)

    def test_a_control_file_that_is_a_link_a_fifo_or_has_a_crlf_token_is_refused(self):
        run = self.control_file()
        path = os.path.join(run, "control.json")
        os.unlink(path)
        os.symlink("/dev/zero", path)
        for kind in ("link to /dev/zero", "fifo", "CR/LF in the token"):
            with self.subTest(kind=kind):
                if kind == "fifo":
                    os.unlink(path)
                    os.mkfifo(path)
                if kind.startswith("CR/LF"):
                    os.unlink(path)
                    self.control_file(token="t0ken\r\nX-Injected: 1")
                result = lens_capped("ctl", run, "status", memory=256 << 20, timeout=20)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertRegex(result.stderr, "not a regular file|not a control file")


class FullDiskTest(TempDirTest):
    def test_a_report_or_verdict_onto_a_full_disk_is_an_error_not_exit_0(self):
        run = os.path.join(self.tmp.name, "run")
        write_lines(os.path.join(run, "rank0.traces.jsonl"), [spans_line(0, step_spans(range(1, 50)))])
        with open(os.path.join(run, "rank0.snapshot.json"), "w") as f:
            json.dump(snapshot(0, 1, 5, [("megatron.train_step", "step", {})]), f)
        for args in (["report", run], ["report", "--json", run], ["hang", run], ["hang", "--json", run]):
            with self.subTest(args=args), open("/dev/full", "w") as full:
                result = subprocess.run([LENS, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("could not write the output to stdout", result.stderr)

    def test_convert_onto_a_disk_that_fills_is_an_error_message(self):
        run = os.path.join(self.tmp.name, "run")
        write_lines(os.path.join(run, "rank0.traces.jsonl"),
                    [spans_line(0, step_spans(range(k, k + 500))) for k in range(1, 5001, 500)])
        for name in ("trace.json.gz", "trace.json"):
            with self.subTest(output=name):
                result = lens_capped("convert", run, "--to", "chrome-json", "-o", os.path.join(self.tmp.name, name),
                                     file_size=4 << 10)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("is the disk full?", result.stderr)


if __name__ == "__main__":
    unittest.main()
