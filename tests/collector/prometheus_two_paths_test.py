"""The same training metrics through both paths into a real Prometheus (Debian's): scraped from lens's own
/metrics endpoint, and sent over OTLP to a real OpenTelemetry Collector whose Prometheus exporter Prometheus scrapes.

pretrain_gpt on 2 data-parallel ranks (the loss is averaged over the replicas, so both ranks report the same
figures): rank 0 serves its metrics on its Prometheus endpoint, rank 1 sends them over OTLP. Rank 1 is stopped at
iteration 21 (a testing aid), so both ranks hold iteration 20's figures while Prometheus scrapes them; then the
values Prometheus holds for each path must be equal. Both ranks read the same GPU of NVML's stand-in, so
its metrics must arrive both ways too, under the names OpenTelemetry's Prometheus translation gives them."""

import glob
import os
import signal
import socket
import subprocess
import time
import unittest

import peers

TRAINER = os.environ.get("LENS_PRETRAIN_GPT", "")
PROMETHEUS = os.environ.get("LENS_PROMETHEUS_PROGRAM", "")
FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "100000", "--log-interval", "5",
         "--otel-enabled", "--otel-span-groups", "per_step", "--testing-slow-rank", "1",
         "--testing-stall-iteration", "21"]
FAKE_NVML = os.environ.get("LENS_FAKE_NVML", "")
GPU_METRICS = ["hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes", "hw_power_watts",
               "hw_temperature_celsius", "dl_gpu_clock_sm_hertz"] if FAKE_NVML else []
METRICS = ["megatron_training_loss", "megatron_training_learning_rate", "megatron_training_grad_norm", *GPU_METRICS]


@unittest.skipUnless(TRAINER and PROMETHEUS and os.access(peers.OTELCOL, os.X_OK),
                     "set by ctest: LENS_PRETRAIN_GPT, LENS_PROMETHEUS_PROGRAM, LENS_PEERS_BIN")
class PrometheusTwoPathsTest(peers.PeerTest):
    def test_the_same_training_metrics_arrive_both_ways_with_equal_values(self):
        collector = self.start(peers.Collector(self.dir, prometheus=True))
        endpoint_port = peers.free_port()
        prometheus = self.start(peers.Prometheus(PROMETHEUS, self.dir,
                                                 {"lens": endpoint_port, "collector": collector.prometheus_port}))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            master_port = str(s.getsockname()[1])
        base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master_port, "WORLD_SIZE": "2",
                "OMP_NUM_THREADS": "1", "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks", "MEGATRON_OTEL_RUN_ID": "two-paths",
                "MEGATRON_OTEL_HANG_SIGNAL": "none", "OTEL_METRIC_EXPORT_INTERVAL": "500",
                "MEGATRON_OTEL_FILE_DIR": os.path.join(self.dir, "telemetry"),  # its files in the test's directory
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}"}
        if FAKE_NVML:  # local ranks 0 and 1 both on GPU 2
            base["LENS_NVML_LIBRARY"] = FAKE_NVML
        per_rank = [{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
                     "OTEL_EXPORTER_PROMETHEUS_PORT": str(endpoint_port), "CUDA_VISIBLE_DEVICES": "2"},
                    {"CUDA_VISIBLE_DEVICES": "3,2"}]
        ranks = [subprocess.Popen([TRAINER, *FLAGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**base, **per_rank[r], "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in range(2)]
        try:
            values = self.wait_for_equal_values(prometheus, ranks)
        finally:
            for r in ranks:
                r.send_signal(signal.SIGKILL)
            outputs = [r.communicate(timeout=60)[0] for r in ranks]
        for name in METRICS:
            lens_value, collector_value = values[name]
            self.assertEqual(lens_value, collector_value, (name, outputs[0][-2000:]))
        self.assertNotEqual(values["megatron_training_loss"][0], "0")
        if GPU_METRICS:  # the stand-in's GPU 2: 82 % busy, 42 GiB used, 512.5 W, SM clock 1980 MHz
            self.assertEqual(values["hw_gpu_utilization_ratio"][0], "0.82")
            self.assertEqual(values["hw_gpu_memory_usage_bytes"][0], str(42 << 30))
            self.assertEqual(values["hw_power_watts"][0], "512.5")
            self.assertEqual(values["dl_gpu_clock_sm_hertz"][0], "1980000000")

    def values(self, prometheus, name):
        """(lens's endpoint, the Collector) last value of `name`, or None where Prometheus has none yet."""
        got = []
        for job in ("lens", "collector"):
            result = prometheus.query(f'last_over_time({name}{{job="{job}"}}[5m])')
            got.append(result[0]["value"][1] if len(result) == 1 else None)
        return tuple(got)

    def wait_for_equal_values(self, prometheus, ranks, seconds=90):
        """Once iteration 20's figures are in (both paths agree on every metric, twice in a row 2 s apart)."""
        deadline, previous = time.monotonic() + seconds, None
        while time.monotonic() < deadline:
            for r in ranks:
                if r.poll() is not None:
                    raise AssertionError(f"a rank ended ({r.returncode}): {r.communicate()[0][-3000:]}")
            values = {name: self.values(prometheus, name) for name in METRICS}
            settled = all(None not in v and v[0] == v[1] for v in values.values())
            if settled and values == previous:
                return values
            previous = values if settled else None
            time.sleep(2)
        return {name: self.values(prometheus, name) for name in METRICS}


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(TRAINER and PROMETHEUS, "set by ctest: LENS_PRETRAIN_GPT, LENS_PROMETHEUS_PROGRAM")
class EveryRankOnOneHostTest(peers.PeerTest):
    """Every rank exporting to Prometheus on one host serves a port of its own (one port for all would fail the second
    rank's setup and take the job down). Each rank serves the port + its local rank and writes where
    (<FILE_DIR>/prometheus/<run id>.rank<R>.<host>.<pid>.json), and a real Prometheus finds both through its file
    service discovery, running as a user of its own (as Debian's package runs it) over a FILE_DIR that lens made: a
    directory made 0700 would hide every target from such a Prometheus, and nothing would say why."""

    def test_two_local_ranks_serve_two_ports_that_prometheus_discovers(self):
        base_port = peers.free_port()
        while not peers.port_is_free(base_port + 1):
            base_port = peers.free_port()
        telemetry = os.path.join(self.dir, "telemetry")
        as_root = os.geteuid() == 0
        if as_root:
            os.chmod(self.dir, 0o755)  # the test's own directory, as a shared file system would be
        prometheus = self.start(peers.Prometheus(PROMETHEUS, self.dir, {},
                                                 file_sd={"lens": os.path.join(telemetry, "prometheus", "*.json")},
                                                 user="nobody" if as_root else None))
        env = {"MEGATRON_OTEL_RUN_ID": "every-rank", "OTEL_METRICS_EXPORTER": "prometheus",
               "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": str(base_port),
               "MEGATRON_OTEL_FILE_DIR": telemetry, "MEGATRON_OTEL_EXPORTER": "file"}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            master_port = str(s.getsockname()[1])
        base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master_port, "WORLD_SIZE": "2",
                "OMP_NUM_THREADS": "1", "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks",
                "MEGATRON_OTEL_HANG_SIGNAL": "none", **env}
        ranks = [subprocess.Popen([TRAINER, *FLAGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
        try:
            found, deadline = [], time.monotonic() + 90
            while time.monotonic() < deadline and len(found) < 2:
                for r in ranks:
                    if r.poll() is not None:
                        raise AssertionError(f"a rank ended ({r.returncode}): {r.communicate()[0][-3000:]}")
                found = prometheus.query('up{job="lens"} == 1')
                time.sleep(1)
            series = prometheus.query('megatron_training_loss{job="lens"}')
            targets = sorted(os.path.basename(p) for p in
                             glob.glob(os.path.join(telemetry, "prometheus", "*.json")))
        finally:
            for r in ranks:
                r.send_signal(signal.SIGKILL)
            outputs = [r.communicate(timeout=60)[0] for r in ranks]
        self.assertEqual([t.split(".")[:2] for t in targets], [["every-rank", "rank0"], ["every-rank", "rank1"]])
        self.assertEqual(len({t.split(".")[-2] for t in targets}), 2, "a file a process: its pid in the name")
        self.assertEqual(sorted(t["metric"]["instance"] for t in found),
                         [f"127.0.0.1:{base_port}", f"127.0.0.1:{base_port + 1}"], outputs[1][-2000:])
        self.assertEqual(sorted(t["metric"]["dl_rank"] for t in found), ["0", "1"])
        for output in outputs:
            self.assertNotIn("metrics are not served", output)
        self.assertTrue(series, "no training metric scraped")
