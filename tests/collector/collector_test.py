"""lens against a real OpenTelemetry Collector (otelcol-lens: the Collector's own service, v0.161.0, built from
pinned Go modules by scripts/setup-deps.sh).

otlp_probe sends a known set of spans (with parents, links and attributes of each type), metric points and log
records; the Collector's file exporter writes what it received. Over gRPC, HTTP/protobuf and HTTP/JSON, with gzip
and without, over TLS and in clear text, the file holds exactly the spans lens counted as exported, span by span,
with the resource lens sent, and `lens report` reads the Collector's file. With the Collector down at the start,
restarted mid-run, or refusing everything under its memory limiter, lens's counts stay exact: what it counted as
exported is in the file, everything else it counted as dropped."""

import collections
import json
import os
import subprocess
import time
import unittest

import peers

PROBE = os.environ.get("LENS_OTLP_PROBE", "")
LENS = os.environ.get("LENS_TOOL", "")
TRAINER = os.environ.get("LENS_PRETRAIN_GPT", "")
TRAINER_FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
                 "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2", "--global-batch-size", "8",
                 "--train-iters", "6", "--log-interval", "1", "--eval-interval", "3", "--eval-iters", "1",
                 "--otel-enabled", "--otel-span-groups", "all"]
SPANS_PER_ITERATION = 6  # a step, its forward-backward, 2 microbatches, each with a light scope (a layer)


def any_value(v):
    """An OTLP JSON AnyValue as Python (the Collector writes int64 as a string, as the OTLP JSON mapping says)."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        return [any_value(x) for x in v["arrayValue"].get("values", [])]
    return v


def attributes(items):
    return {a["key"]: any_value(a.get("value", {})) for a in items or []}


def spans_of(requests):
    """Every span in the Collector's trace requests: a list of (resource attributes, span as the probe writes it)."""
    found = []
    for request in requests:
        for rs in request.get("resourceSpans", []):
            resource = attributes(rs.get("resource", {}).get("attributes"))
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    found.append((resource, {
                        "name": s["name"], "ids": [s["traceId"], s["spanId"]], "parent": s.get("parentSpanId", ""),
                        "links": [[link["traceId"], link["spanId"]] for link in s.get("links", [])],
                        "attributes": attributes(s.get("attributes"))}))
    return found


def metric_points(requests, name):
    points = []
    for request in requests:
        for rm in request.get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    if m["name"] == name:
                        data = m.get("sum") or m.get("histogram") or m.get("gauge") or {}
                        points += data.get("dataPoints", [])
    return points


def log_records(requests):
    return [r for request in requests for rl in request.get("resourceLogs", [])
            for sl in rl.get("scopeLogs", []) for r in sl.get("logRecords", [])]


def train(directory, env):
    """pretrain_gpt on 2 ranks (2 pipeline stages), every rank exporting."""
    peers.run_ranks(TRAINER, TRAINER_FLAGS, 2, {"MEGATRON_OTEL_RUN_ID": "twin", **env}, directory)


def figures_that_are_not_timings(report):
    """What two runs of the same seed must agree on: the spans by name, the steps and their ranks, the losses and
    the training metrics that are not timings or memory, the evaluations, the pipeline's shape, the run, and what
    was lost."""
    return {"spans": {s["name"]: s["count"] for s in report["spans"]},
            "steps": [(s["iteration"], s["ranks"]) for s in report["steps"]],
            "loss": report["loss"],
            "training_metrics": {name: m for name, m in report["training_metrics"].items()
                                 if name.rsplit(".", 1)[1] in ("loss", "grad_norm", "learning_rate", "skipped_iters")},
            "evaluations": [(e["after_iteration"], e["ranks"]) for e in report["evaluations"]],
            "bubble": [(b["stage"], b["steps"], b["microbatches"], b["theoretical"]) for b in report["bubble"]],
            "run": report["run"], "lost": report["lost"], "spans_read": report["read"]["spans"],
            "problems": report["read"]["problems"]}


def lens_report(path):
    result = subprocess.run([LENS, "report", "--json", path], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)


class Probe:
    """otlp_probe run against `url` with `protocol`; `extra` adds or overrides variables."""

    def __init__(self, directory, protocol, url, iterations, pause_ms=0, shutdown_ms=5000, **extra):
        self.reference_path = os.path.join(directory, "reference.jsonl")
        self.iterations = iterations
        env = {"PATH": "/usr/bin:/bin", "MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_SPAN_GROUPS": "all",
               "MEGATRON_OTEL_LOGS_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "lens-probe",
               "OTEL_RESOURCE_ATTRIBUTES": "lens.test.case=collector", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
               "OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BLRP_SCHEDULE_DELAY": "100",
               "OTEL_METRIC_EXPORT_INTERVAL": "300", "MEGATRON_OTEL_HANG_SIGNAL": "none", **extra}
        self.process = subprocess.Popen([PROBE, self.reference_path, str(iterations), str(pause_ms), str(shutdown_ms)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def finish(self, timeout=120):
        out, err = self.process.communicate(timeout=timeout)
        if self.process.returncode != 0:
            raise AssertionError(f"otlp_probe exited {self.process.returncode}: {err[-3000:]}")
        self.stderr = err
        self.stats = json.loads(out.strip().splitlines()[-1])
        with open(self.reference_path, encoding="utf-8") as f:
            self.reference = [json.loads(line) for line in f]
        return self


def wait_for(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


@unittest.skipUnless(PROBE and os.access(peers.OTELCOL, os.X_OK), "set by ctest: LENS_OTLP_PROBE, LENS_PEERS_BIN")
class CollectorTest(peers.PeerTest):
    def url(self, collector, protocol, tls=False):
        port = collector.grpc_port if protocol == "grpc" else collector.http_port
        return f"{'https' if tls else 'http'}://127.0.0.1:{port}"

    def collected(self, collectors, expected_spans):
        """Waits until the Collectors' files hold `expected_spans` spans (or 20 s), stops them (they flush), and
        returns every span they wrote."""
        wait_for(lambda: sum(len(spans_of(c.read("traces"))) for c in collectors) >= expected_spans)
        for c in collectors:
            self.assertEqual(c.stop(), 0, c.log())
        return [s for c in collectors for s in spans_of(c.read("traces"))]

    def assert_exactly_the_exported_spans(self, probe, collected):
        """Span by span: no span twice, each collected one is a span the probe made with its ids, name, parent,
        links and attributes, and there are as many as lens counted as exported; the rest lens counted dropped."""
        stats = probe.stats["spans"]
        self.assertEqual(stats["produced"], probe.iterations * SPANS_PER_ITERATION, stats)
        self.assertEqual(stats["exported"] + stats["dropped"], stats["produced"], stats)
        by_id = {tuple(s["ids"]): s for s in probe.reference}
        ids = [tuple(span["ids"]) for _, span in collected]
        self.assertEqual(len(ids), len(set(ids)), "a span arrived twice")
        self.assertEqual(len(ids), stats["exported"], stats)
        for resource, span in collected:
            self.assertIn(tuple(span["ids"]), by_id, span)
            want = by_id[tuple(span["ids"])]
            for key in ("name", "parent", "links"):
                self.assertEqual(span[key], want[key], span)
            for key, value in want["attributes"].items():
                self.assertEqual(span["attributes"].get(key), value, (key, span))
            self.assertEqual(resource.get("service.name"), "lens-probe", resource)
            self.assertEqual(resource.get("lens.test.case"), "collector", resource)
            self.assertEqual(resource.get("telemetry.sdk.name"), "lens", resource)

    def run_matrix_case(self, protocol, gzip, tls):
        certificate = peers.make_certificate(self.dir) if tls else None
        collector = self.start(peers.Collector(self.dir, tls=certificate))
        extra = {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"} if gzip else {}
        if tls:
            extra["OTEL_EXPORTER_OTLP_CERTIFICATE"] = certificate[0]
        probe = Probe(self.dir, protocol, self.url(collector, protocol, tls), 150, **extra).finish()
        self.assertEqual(probe.stats["spans"]["dropped"], 0, probe.stderr)
        self.assertEqual(probe.stats["logs"]["dropped"], 0, probe.stderr)
        wait_for(lambda: len(log_records(collector.read("logs"))) >= probe.stats["logs"]["exported"])
        collected = self.collected([collector], probe.stats["spans"]["exported"])
        self.assert_exactly_the_exported_spans(probe, collected)
        self.assertEqual(len(collected), 150 * SPANS_PER_ITERATION)
        records = log_records(collector.read("logs"))
        self.assertEqual(len([r for r in records if r["body"].get("stringValue") == "probe step done"]), 150)
        self.assertEqual(len(records), probe.stats["logs"]["exported"])
        metrics = collector.read("metrics")
        steps = metric_points(metrics, "probe.steps")
        self.assertTrue(steps, "no probe.steps point arrived")
        self.assertEqual(max(int(p["asInt"]) for p in steps), 150)  # cumulative: the last export has them all
        self.assertEqual(max(int(p["count"]) for p in metric_points(metrics, "probe.step_time")), 150)
        return collector, probe

    def test_grpc(self):
        self.run_matrix_case("grpc", gzip=False, tls=False)

    def test_grpc_gzip(self):
        self.run_matrix_case("grpc", gzip=True, tls=False)

    def test_grpc_tls(self):
        self.run_matrix_case("grpc", gzip=False, tls=True)

    def test_http_protobuf(self):
        self.run_matrix_case("http/protobuf", gzip=False, tls=False)

    def test_http_protobuf_gzip_tls(self):
        self.run_matrix_case("http/protobuf", gzip=True, tls=True)

    def test_http_json_gzip(self):
        self.run_matrix_case("http/json", gzip=True, tls=False)

    def test_lens_report_reads_the_collectors_file(self):
        collector, probe = self.run_matrix_case("grpc", gzip=False, tls=False)
        report = subprocess.run([LENS, "report", "--json", collector.output], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(report.returncode, 0, report.stderr)
        figures = json.loads(report.stdout)
        counts = {s["name"]: s["count"] for s in figures["spans"]}
        want = collections.Counter(s["name"] for s in probe.reference)
        self.assertEqual(counts, dict(want))

    @unittest.skipUnless(TRAINER and LENS, "set by ctest: LENS_PRETRAIN_GPT, LENS_TOOL")
    def test_lens_report_of_the_collectors_file_equals_lens_report_of_lens_files(self):
        """Twin runs of pretrain_gpt (same seed, same run id): one writes lens's own files, the other exports over
        OTLP to the Collector; `lens report` of each agrees on every figure that is not a timing."""
        files = os.path.join(self.dir, "telemetry")
        train(self.dir, {"MEGATRON_OTEL_EXPORTER": "file", "MEGATRON_OTEL_FILE_DIR": files})
        collector = self.start(peers.Collector(self.dir))
        train(self.dir, {"MEGATRON_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                         "OTEL_EXPORTER_OTLP_ENDPOINT": self.url(collector, "grpc")})
        own = lens_report(files)
        wait_for(lambda: len(spans_of(collector.read("traces"))) >= own["read"]["spans"])
        self.assertEqual(collector.stop(), 0, collector.log())
        through_collector = lens_report(collector.output)
        self.assertGreater(own["read"]["spans"], 0)
        self.maxDiff = None
        self.assertEqual(figures_that_are_not_timings(through_collector), figures_that_are_not_timings(own))

    def test_collector_down_at_the_start_then_up(self):
        collector = peers.Collector(self.dir)
        self.peers.append(collector)
        # The first batch's deadline (OTEL_BSP_EXPORT_TIMEOUT, 30 s) bounds the retries, not the shutdown: how soon
        # the Collector listens (seconds on a loaded machine) and where lens's back-off stands then (up to 5 s
        # between tries) must not decide the outcome.
        probe = Probe(self.dir, "grpc", self.url(collector, "grpc"), 40, pause_ms=50, shutdown_ms=60000)
        time.sleep(1.5)  # lens has found nobody there and is backing off
        collector.start()
        probe.finish()
        collected = self.collected([collector], probe.stats["spans"]["exported"])
        self.assert_exactly_the_exported_spans(probe, collected)
        self.assertEqual(probe.stats["spans"]["dropped"], 0, "retried until the Collector came up: " + probe.stderr)

    def test_collector_restarted_mid_run(self):
        first = self.start(peers.Collector(self.dir, output="first"))
        probe = Probe(self.dir, "http/protobuf", self.url(first, "http/protobuf"), 60, pause_ms=50,
                      shutdown_ms=60000)  # as above: the second Collector's start must not decide the outcome
        time.sleep(1.0)
        self.assertEqual(first.stop(), 0, first.log())
        time.sleep(0.5)
        second = self.start(peers.Collector(self.dir, output="second", same_ports_as=first))
        probe.finish()
        collected = self.collected([first, second], probe.stats["spans"]["exported"])
        self.assertTrue(spans_of(first.read("traces")), "the first Collector got nothing before it stopped")
        self.assert_exactly_the_exported_spans(probe, collected)

    def test_memory_limiter_refusing_everything(self):
        """Under its memory limiter the Collector answers HTTP 503 (no Retry-After) and gRPC UNAVAILABLE, with its
        reason: lens retries within the batch's deadline, then drops and counts; the reason is in lens's log."""
        collector = self.start(peers.Collector(self.dir, memory_limit_mib=1))
        wait_for(lambda: "Refusing data" in collector.log())  # its first check, 100 ms after the start
        self.assertIn("Refusing data", collector.log())
        for protocol in ("grpc", "http/protobuf"):
            with self.subTest(protocol=protocol):
                probe = Probe(self.dir, protocol, self.url(collector, protocol), 10, OTEL_BSP_EXPORT_TIMEOUT="1500",
                              OTEL_BLRP_EXPORT_TIMEOUT="1500", OTEL_EXPORTER_OTLP_TIMEOUT="1000").finish()
                spans = 10 * SPANS_PER_ITERATION
                self.assertEqual(probe.stats["spans"], {"produced": spans, "exported": 0, "dropped": spans,
                                                        "export_failures": probe.stats["spans"]["export_failures"]})
                self.assertEqual(probe.stats["logs"]["dropped"], probe.stats["logs"]["produced"])
                self.assertIn("data refused due to high memory usage", probe.stderr)
                self.assertIn("UNAVAILABLE" if protocol == "grpc" else "HTTP 503", probe.stderr)
        self.assertEqual(self.collected([collector], 0), [])

    def test_a_collector_that_cannot_start_is_named(self):
        """Its port taken, or a configuration it refuses: the test fails at once naming the Collector, with its own
        reason from its log, and nothing is left running."""
        taken = self.start(peers.Collector(self.dir, output="taken"))
        clash = peers.Collector(self.dir, output="clash")
        clash.config["receivers"]["otlp"]["protocols"]["grpc"] = peers.endpoint(taken.grpc_port)
        with self.assertRaisesRegex(AssertionError, "otelcol-lens failed to start.*(?s:.*)address already in use"):
            self.start(clash)
        bad = peers.Collector(self.dir, output="bad")
        bad.config["service"]["pipelines"]["traces"]["exporters"].append("no_such_exporter")
        started = time.monotonic()
        with self.assertRaisesRegex(AssertionError, "otelcol-lens failed to start.*(?s:.*)no_such_exporter"):
            self.start(bad)
        self.assertLess(time.monotonic() - started, 30)
        self.assertIsNotNone(clash.process.poll())
        self.assertIsNotNone(bad.process.poll())


if __name__ == "__main__":
    unittest.main()
