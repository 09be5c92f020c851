"""The Collector configurations lens ships (deploy/), run or validated by the real Collector (otelcol-lens).

The backend tier (deploy/otelcol-backend.yaml) runs as written (its ${env:...} values and ports filled in: the test
build reads files only): pretrain_gpt exports to it, and `lens report` reads the run's directory it wrote. The
gateway tier (deploy/otelcol.yaml) routes traces with the `loadbalancing` exporter, which the test Collector cannot
have (its AWS Cloud Map resolver needs a Go module the proxy here does not serve): its routing key is checked, and
the rest of it is validated by the real Collector with an OTLP exporter in the loadbalancing exporter's place."""

import json
import os
import subprocess
import unittest

import yaml

import peers
from collector_test import TRAINER, TRAINER_FLAGS, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LENS = os.environ.get("LENS_TOOL", "")


def load(name, values):
    """deploy/<name> with its ${env:NAME} values filled in from `values`."""
    with open(os.path.join(ROOT, "deploy", name), encoding="utf-8") as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace("${env:" + key + "}", value)
    assert "${env:" not in text, "a value the test did not fill in"
    return yaml.safe_load(text)


class ShippedConfig(peers.Peer):
    """otelcol-lens with a configuration of deploy/, its receivers moved to free loopback ports."""

    def __init__(self, directory, config):
        self.grpc_port, self.http_port = peers.free_port(), peers.free_port()
        protocols = config["receivers"]["otlp"]["protocols"]
        protocols["grpc"]["endpoint"] = f"127.0.0.1:{self.grpc_port}"
        protocols["http"]["endpoint"] = f"127.0.0.1:{self.http_port}"
        super().__init__("otelcol-lens", peers.OTELCOL, directory, config, [self.grpc_port, self.http_port])


def validate(directory, config):
    path = os.path.join(directory, "validate.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return subprocess.run([peers.OTELCOL, "validate", f"--config={path}"], capture_output=True, text=True,
                          timeout=60)


@unittest.skipUnless(os.access(peers.OTELCOL, os.X_OK), "set by ctest: LENS_PEERS_BIN")
class DeployConfigTest(peers.PeerTest):
    @unittest.skipUnless(TRAINER and LENS, "set by ctest: LENS_PRETRAIN_GPT, LENS_TOOL")
    def test_the_backend_tier_writes_a_directory_per_run_that_lens_report_reads(self):
        files = os.path.join(self.dir, "otel")
        config = load("otelcol-backend.yaml", {"LENS_FILE_DIR": files, "LENS_JAEGER_OTLP": "127.0.0.1:1"})
        collector = self.start(ShippedConfig(self.dir, config))
        outputs = peers.run_ranks(TRAINER, TRAINER_FLAGS, 2, {
            "MEGATRON_OTEL_RUN_ID": "deployed", "MEGATRON_OTEL_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}"},
            self.dir)
        exported = sum(int(line.split(" exported,")[0].rsplit(" ", 1)[1]) for out in outputs
                       for line in out.splitlines() if line.startswith("lens: spans:"))
        run_dir = os.path.join(files, "deployed")

        def spans_written():
            report = subprocess.run([LENS, "report", "--json", run_dir], capture_output=True, text=True)
            return json.loads(report.stdout)["read"]["spans"] if report.returncode == 0 else 0

        wait_for(lambda: spans_written() >= exported)
        self.assertEqual(collector.stop(), 0, collector.log())
        self.assertEqual(os.listdir(files), ["deployed"], "a directory per run id")
        self.assertLessEqual({"metrics.jsonl", "traces.jsonl"}, set(os.listdir(run_dir)))
        report = json.loads(subprocess.run([LENS, "report", "--json", run_dir], capture_output=True,
                                           text=True).stdout)
        self.assertEqual(report["read"]["spans"], exported)
        self.assertEqual(report["run"]["run_ids"], ["deployed"])
        self.assertEqual([(s["iteration"], s["ranks"]) for s in report["steps"]], [(i, 2) for i in range(1, 7)])

    def test_the_gateway_tier_routes_by_trace_id_and_the_rest_of_it_validates(self):
        config = load("otelcol.yaml", {"LENS_BACKEND_COLLECTORS": "backend.example"})
        balancer = config["exporters"].pop("loadbalancing")
        self.assertEqual(balancer["routing_key"], "traceID")
        self.assertEqual(balancer["resolver"]["dns"]["hostname"], "backend.example")
        # The same OTLP settings as the loadbalancing exporter's, to one backend, in its place.
        config["exporters"]["otlp/routed"] = {"endpoint": "backend.example:4317", **balancer["protocol"]["otlp"]}
        config["service"]["pipelines"]["traces"]["exporters"] = ["otlp/routed"]
        result = validate(self.dir, config)
        self.assertEqual(result.returncode, 0, result.stderr)
        # And validation is real: a misspelt key is refused.
        config["processors"]["batch"]["send_batch_sise"] = 1
        self.assertNotEqual(validate(self.dir, config).returncode, 0)


if __name__ == "__main__":
    unittest.main()
