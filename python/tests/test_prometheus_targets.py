"""The Prometheus discovery directory <FILE_DIR>/prometheus (docs/METRICS_AND_LOGS.md): made readable by a Prometheus
of another user where lens makes it, whatever the umask; an existing one keeps its mode (a shared 0755 one was made
0700, hiding every job's targets); a directory closed to other users is said; and each serving process has a target
file of its own, so a second job with the same run id and rank neither replaces nor removes the first's."""

import glob
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

SERVE = textwrap.dedent("""
    import os, sys
    os.umask(0o077)  # a cautious user's: what lens makes for Prometheus must not depend on it
    import lens
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1)
    print("serving", flush=True)
    sys.stdin.readline()
    handle.shutdown()
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A process that sets up lens with the Prometheus exporter and serves until stop()."""

    def __init__(self, file_dir, run_id="prom-targets"):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_LENS_", "MEGATRON_OTEL_", "OTEL_"))}
        env.update(NEMO_LENS_ENABLED="1", NEMO_LENS_FILE_DIR=file_dir, NEMO_LENS_RUN_ID=run_id,
                   NEMO_LENS_TRACES_ENABLED="0", NEMO_LENS_HANG_SIGNAL="none", OTEL_METRICS_EXPORTER="prometheus",
                   OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1", OTEL_EXPORTER_PROMETHEUS_PORT=str(free_port()))
        self.process = subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        if line.strip() != "serving":
            raise AssertionError(f"no setup: {line}{self.process.stderr.read()}")

    def stop(self):
        """Shuts it down; its stderr."""
        out, err = self.process.communicate("stop\n", timeout=60)
        if self.process.returncode != 0:
            raise AssertionError(f"exit {self.process.returncode}: {err}")
        return err


def targets(file_dir):
    return sorted(glob.glob(os.path.join(file_dir, "prometheus", "*.json")))


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class PrometheusTargetsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        os.chmod(self.tmp.name, 0o755)

    def test_a_second_job_with_the_same_run_id_and_rank_leaves_the_firsts_target(self):
        file_dir = os.path.join(self.tmp.name, "telemetry")
        first = Server(file_dir)
        (first_target,) = targets(file_dir)
        second = Server(file_dir)
        self.assertEqual(len(targets(file_dir)), 2, "a file a process")
        with open(first_target, encoding="utf-8") as f:
            port = json.load(f)[0]["targets"][0]
        second.stop()
        self.assertEqual(targets(file_dir), [first_target], "the second removed only its own")
        with open(first_target, encoding="utf-8") as f:
            self.assertEqual(json.load(f)[0]["targets"][0], port, "and never replaced the first's")
        first.stop()
        self.assertEqual(targets(file_dir), [])
        self.assertTrue(os.path.isdir(os.path.join(file_dir, "prometheus")), "the shared directory stays")

    def test_what_lens_makes_is_readable_by_others_whatever_the_umask(self):
        file_dir = os.path.join(self.tmp.name, "made", "telemetry")
        server = Server(file_dir)
        (target,) = targets(file_dir)
        err = server.stop()
        for directory in (os.path.dirname(file_dir), file_dir, os.path.join(file_dir, "prometheus")):
            self.assertEqual(mode(directory), 0o755, directory)
        self.assertNotIn("closed to other users", err)
        self.assertEqual(target.rsplit("/", 1)[1].split(".")[:2], ["prom-targets", "rank0"])

    def test_an_existing_directory_keeps_its_mode_and_a_closed_one_is_said(self):
        file_dir = os.path.join(self.tmp.name, "telemetry")
        shared = os.path.join(file_dir, "prometheus")
        os.makedirs(shared)
        os.chmod(file_dir, 0o755)
        os.chmod(shared, 0o1777)  # a shared, sticky directory every job writes in
        err = Server(file_dir).stop()
        self.assertEqual(mode(shared), 0o1777)
        self.assertNotIn("closed to other users", err)
        os.chmod(shared, 0o700)  # one only its owner can read
        err = Server(file_dir).stop()
        self.assertEqual(mode(shared), 0o700, "left as it is")
        self.assertIn(f"{shared} is closed to other users", err)


if __name__ == "__main__":
    unittest.main()
