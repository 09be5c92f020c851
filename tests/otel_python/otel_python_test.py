"""lens beside real OpenTelemetry Python (opentelemetry-sdk 1.45.2 and its OTLP exporters, from PyPI, pinned with
hashes in tests/peers/python/requirements.txt and installed into .venv by scripts/setup-deps.sh) in one process,
both exporting to the same real Collector: every span of each SDK arrives, under its own service, parented
across the two SDKs (lens serves the OpenTelemetry API's context, so an SDK span inside a lens span is its child and
the other way round), and lens's counts are exact. Over gRPC on both sides (lens's C++ gRPC from Debian and the
grpcio wheel's in one process), over HTTP on both, and one of each. Run by .venv's interpreter."""

import collections
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "collector"))
import collector_test  # noqa: E402
import peers  # noqa: E402

ITERATIONS = 50


def otel_sdk_importable():
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        return True
    except ImportError:
        return False


@unittest.skipUnless(os.environ.get("LENS_BUILD_DIR") and os.access(peers.OTELCOL, os.X_OK),
                     "set by ctest: LENS_BUILD_DIR, LENS_PEERS_BIN")
class BothSdksTest(peers.PeerTest):
    def setUp(self):
        super().setUp()
        if not otel_sdk_importable():
            self.fail(f"{sys.executable} has no OpenTelemetry SDK: run ./scripts/setup-deps.sh (it makes .venv)")

    def run_both(self, lens_protocol, otel_protocol):
        collector = self.start(peers.Collector(self.dir))
        env = {**os.environ, "PYTHONPATH": os.path.join(os.environ["LENS_BUILD_DIR"], "python")}
        result = subprocess.run([sys.executable, os.path.join(HERE, "both_sdks.py"), str(ITERATIONS), lens_protocol,
                                 otel_protocol, str(collector.grpc_port), str(collector.http_port)],
                                capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        said = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertTrue(said["otel_flushed"])
        self.assertEqual((said["lens"]["produced"], said["lens"]["exported"], said["lens"]["dropped"]),
                         (3 * ITERATIONS, 3 * ITERATIONS, 0), result.stderr)
        collected = self.wait_and_read(collector, 5 * ITERATIONS)
        by_service_and_name = collections.Counter((r["service.name"], s["name"]) for r, s in collected)
        self.assertEqual(by_service_and_name, {("lens-side", "lens.outer"): ITERATIONS,
                                               ("lens-side", "lens.innermost"): ITERATIONS,
                                               ("lens-side", "lens.inside_otel"): ITERATIONS,
                                               ("otel-side", "otel.inner"): ITERATIONS,
                                               ("otel-side", "otel.outer"): ITERATIONS})
        ids = {s["ids"][1]: s for _, s in collected}
        self.assertEqual(len(ids), 5 * ITERATIONS, "every span id once")
        # lens serves the OpenTelemetry API's context: one current span for both SDKs, so they nest in
        # both directions, each span in its parent's trace.
        parents = {"lens.outer": None, "otel.inner": "lens.outer", "lens.innermost": "otel.inner",
                   "otel.outer": None, "lens.inside_otel": "otel.outer"}
        for _, span in collected:
            expected = parents[span["name"]]
            if expected is None:
                self.assertEqual(span["parent"], "", span)
            else:
                self.assertEqual(ids[span["parent"]]["name"], expected, span)
                self.assertEqual(ids[span["parent"]]["ids"][0], span["ids"][0])
            self.assertIn("iteration", span["attributes"])
        sdk_names = {r["telemetry.sdk.name"] for r, _ in collected}
        self.assertEqual(sdk_names, {"lens", "opentelemetry"})

    def wait_and_read(self, collector, expected):
        collector_test.wait_for(lambda: len(collector_test.spans_of(collector.read("traces"))) >= expected)
        self.assertEqual(collector.stop(), 0, collector.log())
        return collector_test.spans_of(collector.read("traces"))

    def test_both_over_grpc(self):
        self.run_both("grpc", "grpc")

    def test_both_over_http(self):
        self.run_both("http/protobuf", "http/protobuf")

    def test_lens_over_grpc_the_sdk_over_http(self):
        self.run_both("grpc", "http/protobuf")


if __name__ == "__main__":
    unittest.main()
