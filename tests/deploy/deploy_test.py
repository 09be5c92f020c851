"""The operator's kit in deploy/, each piece checked by the real tool: Prometheus's rules by promtool (check and
unit tests), the rules and the Grafana dashboard against a real Prometheus scraping a live 4-rank pretrain_gpt job
in which one rank turns slow mid-run (the straggler alert fires naming it, and not before), every dashboard query
returning data from that job, and the Slurm batch script run as sbatch would (srun and scontrol stand-ins that
run here)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "collector"))
import peers  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
RULES = os.path.join(DEPLOY, "prometheus", "lens.rules.yml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "lens-training.json")
TRAINER = os.environ.get("LENS_PRETRAIN_GPT")
PROMETHEUS = os.environ.get("LENS_PROMETHEUS_PROGRAM")
PROMTOOL = os.environ.get("LENS_PROMTOOL_PROGRAM")
ARTIFACTS = os.environ.get("LENS_TEST_ARTIFACTS")

# STRAGGLER_INTERVAL of the live job: the default. Windows of 10 steps scored an unslowed rank 1.36x its peer on a
# 2-core machine running this job's 4 ranks beside two busy loops (and flagged rank 0 in one CI run of this test);
# windows of 20 steps stayed within 1.21x there.
INTERVAL = 20
SLOWED_RANK = "1"
SLOW_FROM = 161      # the first slowed iteration: Prometheus scrapes the job some seconds before
# deploy/README.md: the alert fires within two windows of the slowdown, plus a scrape and an evaluation. Two windows
# are iterations; the rest is seconds, whatever a step lasts on the machine: from the poll that first sees the
# second slowed window done (the iteration's scrape) to the poll that sees the alert, at most a scrape of the flag's
# rank, an evaluation (1 s each here) and a poll (0.5 s), and a scrape's second of skew between ranks: 4 s.
SECOND_WINDOW_DONE = SLOW_FROM + 2 * INTERVAL - 1
FIRES_WITHIN_S = 4
# Before the slowdown no rank is flagged: checked while the highest iteration scraped is two windows short of it, since
# the iteration and the flag come from scrapes of different ranks, one of them up to a scrape later (seen: a flag of
# window 161-170 beside an iteration of 155 scraped before it, on a loaded 2-core machine).
QUIET_BEFORE = SLOW_FROM - 2 * INTERVAL
GPU_ROW = "GPU (when present)"  # lens's hw.gpu.* (NVML) and dcgm-exporter's: no GPU here


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def dashboard_panels(dashboard):
    """(row title, panel) for every panel that is not a row, in order."""
    row = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        yield row, panel


def substitute(expr, run_id):
    return (expr.replace("$job", "lens").replace("$run_id", run_id).replace("$host", ".*")
            .replace("$__rate_interval", "20s"))


@unittest.skipUnless(PROMTOOL, "LENS_PROMTOOL_PROGRAM names promtool (set by ctest)")
class RulesTest(unittest.TestCase):
    def test_promtool_checks_the_rules_and_the_configuration(self):
        result = promtool("check", "rules", RULES)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("SUCCESS: 8 rules found", result.stdout)
        result = promtool("check", "config", os.path.join(DEPLOY, "prometheus", "prometheus.yml"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_promtool_unit_tests_fire_each_alert_and_only_when_it_should(self):
        result = promtool("test", "rules", "lens.rules.test.yml", cwd=os.path.join(DEPLOY, "prometheus"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(DEPLOY, "prometheus", "lens.rules.test.yml")) as f:
            tested = {t["alertname"] for case in yaml.safe_load(f)["tests"] for t in case.get("alert_rule_test", [])}
        with open(RULES) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r}
        self.assertEqual(tested, alerts)  # every alert has its unit test


class DashboardStructureTest(unittest.TestCase):
    def setUp(self):
        with open(DASHBOARD) as f:
            self.dashboard = json.load(f)

    def test_ids_are_unique_and_every_panel_and_query_has_the_datasource_variable(self):
        ids = [p["id"] for p in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for _, panel in dashboard_panels(self.dashboard):
            self.assertEqual(panel["datasource"], {"type": "prometheus", "uid": "${datasource}"}, panel["title"])
            self.assertTrue(panel["targets"], panel["title"])
            for target in panel["targets"]:
                self.assertEqual(target["datasource"]["uid"], "${datasource}", panel["title"])

    def test_variables_and_no_hard_coded_job_or_instance(self):
        variables = {v["name"]: v for v in self.dashboard["templating"]["list"]}
        self.assertEqual(set(variables), {"datasource", "job", "run_id", "host"})
        self.assertIn("host_name", variables["host"]["query"]["query"])  # the hosts this run's ranks name
        datasource = variables["datasource"]
        self.assertEqual((datasource["type"], datasource["query"]), ("datasource", "prometheus"))
        for row, panel in dashboard_panels(self.dashboard):
            for target in panel["targets"]:
                expr = target["expr"]
                self.assertNotRegex(expr, r'\b(job|instance)\s*=~?\s*"(?!\$)', panel["title"])
                if "DCGM_" in expr:  # dcgm-exporter's series carry no run id: only the run's hosts
                    self.assertIn('Hostname=~"$host"', expr, panel["title"])
                else:
                    self.assertIn('job=~"$job", nemo_run_id=~"$run_id"', expr, panel["title"])

    def test_the_panels_of_nemo_lens_s_dashboard_are_here(self):
        """What NeMo Lens's megatron-training dashboard shows: loss, gradient norm, learning rate, skipped iterations,
        step-time percentiles, throughput, memory; the GPUs from lens's own hw.gpu.*."""
        exprs = " ".join(t["expr"] for _, p in dashboard_panels(self.dashboard) for t in p["targets"])
        for series in ("megatron_training_loss", "megatron_training_grad_norm", "megatron_training_learning_rate",
                       "megatron_training_skipped_iters_total",
                       "megatron_training_step_duration_ms_milliseconds_bucket",
                       "megatron_training_tokens_per_sec", "megatron_training_memory_allocated_gb",
                       "hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes"):
            self.assertIn(series, exprs)
        self.assertIn("histogram_quantile(0.99", exprs)


@unittest.skipUnless(TRAINER and PROMETHEUS and PROMTOOL, "set by ctest: the trainer, prometheus and promtool")
class LiveTest(peers.PeerTest):
    """A real Prometheus with deploy/prometheus/prometheus.yml and lens.rules.yml (scrape and evaluation every
    second, the target files of this job) scraping a 4-rank pretrain_gpt (pipeline 2 x data 2), rank 1 slowed
    from iteration SLOW_FROM by the trainer's testing flag."""

    def start_prometheus(self, telemetry):
        with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [RULES]
        job = config["scrape_configs"][0]
        self.assertTrue(job["honor_labels"])
        job["file_sd_configs"] = [{"files": [os.path.join(telemetry, "prometheus", "*.json")],
                                   "refresh_interval": "1s"}]
        prometheus = peers.Prometheus(PROMETHEUS, self.dir, {})
        with open(prometheus.args[1].split("=", 1)[1], "w") as f:
            yaml.safe_dump(config, f)
        return self.start(prometheus)

    def start_job(self, telemetry):
        base_port = peers.free_port()
        while not all(peers.port_is_free(base_port + k) for k in range(4)):
            base_port = peers.free_port()
        env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(peers.free_port()),
               "WORLD_SIZE": "4", "MEGATRON_OTEL_RUN_ID": "live-straggler", "MEGATRON_OTEL_EXPORTER": "file",
               "MEGATRON_OTEL_FILE_DIR": telemetry, "MEGATRON_OTEL_STRAGGLER_INTERVAL": str(INTERVAL),
               "OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
               "OTEL_EXPORTER_PROMETHEUS_PORT": str(base_port), "MEGATRON_OTEL_HANG_SIGNAL": "none"}
        flags = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "32",
                 "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2", "--global-batch-size", "16",
                 "--train-iters", "2000", "--log-interval", "5", "--testing-slow-rank", "1", "--testing-slow-ms", "15",
                 "--testing-slow-from", str(SLOW_FROM), "--otel-enabled"]
        return [subprocess.Popen([TRAINER, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(4)]

    def test_the_straggler_alert_fires_naming_the_slowed_rank_and_every_dashboard_query_has_data(self):
        telemetry = os.path.join(self.dir, "telemetry")
        prometheus = self.start_prometheus(telemetry)
        ranks = self.start_job(telemetry)
        try:
            quiet, firing, observed = self.watch(prometheus, ranks)
            answers = self.ask_every_panel(prometheus, "live-straggler")
            # While the job serves it: once its targets are gone, Prometheus marks their series stale.
            scored = prometheus.query(f'lens_straggler_flagged_windows{{job="lens", dl_rank="{SLOWED_RANK}"}}')
        finally:
            for r in ranks:
                r.send_signal(signal.SIGTERM)  # pretrain_gpt stops at the next iteration
            outputs = [r.communicate(timeout=120)[0] for r in ranks]
        self.assertEqual([r.returncode for r in ranks], [0] * 4, [o[-1500:] for o in outputs])
        # Before the slowdown: windows scored, all ranks at 0, no alert.
        self.assertGreaterEqual(quiet, 2, observed)
        self.assertIsNotNone(firing, observed)
        alert, iteration, seen_at = firing
        labels = ("alertname", "alertstate", "dl_rank", "dl_pipeline_parallel_rank", "nemo_run_id", "severity",
                  "host_name", "dl_local_rank")
        # The slowed rank's own host and local rank (its LOCAL_RANK), though rank 0 scores and serves the series.
        self.assertEqual({k: alert["metric"].get(k) for k in labels},
                         {"alertname": "LensStraggler", "alertstate": "firing", "dl_rank": SLOWED_RANK,
                          "dl_pipeline_parallel_rank": "0", "nemo_run_id": "live-straggler", "severity": "warning",
                          "host_name": socket.gethostname(), "dl_local_rank": SLOWED_RANK})
        self.assertEqual({s["metric"]["service_instance_id"] for s in scored}, {f"live-straggler-rank{SLOWED_RANK}"})
        self.assertEqual([o for o in observed if set(o[2]) - {SLOWED_RANK}], [], observed)  # no other rank named
        done_at = min((o[4] for o in observed if o[0] is not None and o[0] >= SECOND_WINDOW_DONE), default=seen_at)
        self.assertLessEqual(seen_at - done_at, FIRES_WITHIN_S, observed)
        if ARTIFACTS and os.path.isdir(ARTIFACTS):  # the alert and the panels' answers, for a person
            with open(os.path.join(ARTIFACTS, "deploy_straggler_alert.json"), "w") as f:
                json.dump({"alert": alert, "iteration_when_seen": iteration, "slowed_from": SLOW_FROM,
                           "panels": answers}, f, indent=1)
        for row, title, series in answers:
            if row == GPU_ROW:
                self.assertIsNotNone(series, title)  # a valid query, empty without dcgm-exporter
            else:
                self.assertTrue(series, f"panel {title!r}: no data")

    def watch(self, prometheus, ranks):
        """Polls until the straggler alert names the slowed rank (or 120 s): polls seen quiet before the slowdown,
        that alert with the iteration and the second (from the first poll) when it was first seen firing, and what
        was observed at each poll (the highest iteration, the highest flag, the ranks named by a firing alert, every
        rank's last score, the second)."""
        quiet, observed, started = 0, [], time.monotonic()
        while time.monotonic() < started + 120:
            for r in ranks:
                if r.poll() is not None:
                    raise AssertionError(f"a rank ended ({r.returncode}): {r.communicate()[0][-3000:]}")
            iteration = prometheus.query('max(lens_progress_iteration{job="lens"})')
            iteration = int(float(iteration[0]["value"][1])) if iteration else None
            flagged = prometheus.query('max(lens_straggler_flagged{job="lens"})')
            alerts = prometheus.query('ALERTS{alertname="LensStraggler", alertstate="firing"}')
            named = sorted(a["metric"]["dl_rank"] for a in alerts)
            scores = {s["metric"]["dl_rank"]: round(float(s["value"][1]), 2)
                      for s in prometheus.query('lens_straggler_score{job="lens"}')}
            now = round(time.monotonic() - started, 1)
            observed.append((iteration, flagged[0]["value"][1] if flagged else None, named, scores, now))
            slowed = [a for a in alerts if a["metric"]["dl_rank"] == SLOWED_RANK]
            if slowed:
                return quiet, (slowed[0], iteration, now), observed
            if iteration is not None and iteration < QUIET_BEFORE and flagged:
                self.assertEqual(flagged[0]["value"][1], "0", observed)
                quiet += 1
            time.sleep(0.5)
        return quiet, None, observed

    def ask_every_panel(self, prometheus, run_id):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        time.sleep(3)  # a few scrapes after the alert: every rate has two samples
        answers = []
        for row, panel in dashboard_panels(dashboard):
            for target in panel["targets"]:
                expr = substitute(target["expr"], run_id)
                try:
                    answers.append((row, panel["title"], prometheus.query(expr)))
                except urllib.error.HTTPError as e:
                    raise AssertionError(f"panel {panel['title']!r}: {expr}: {e.read().decode()}") from e
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"]["query"])
                series = prometheus.query(substitute(match.group(1), run_id))
                answers.append(("variables", variable["name"], [s["metric"][match.group(2)] for s in series]))
        return answers


@unittest.skipUnless(TRAINER and PROMETHEUS and os.access(peers.JAEGER, os.X_OK) and os.access(peers.OTELCOL, os.X_OK),
                     "set by ctest: the trainer, prometheus, LENS_PEERS_BIN")
class StackTest(unittest.TestCase):
    """scripts/stack.sh up, as a person runs it: the Collector, Jaeger and Prometheus with the shipped configurations
    on loopback ports; a 4-rank pretrain_gpt pointed at it as the script says, rank 1 slowed: its traces reach Jaeger's
    API through the Collector (and the Collector's files), Prometheus scrapes it and fires LensStraggler naming rank 1
    and its host; `down` stops all three."""

    def test_up_a_job_shows_in_jaeger_and_prometheus_and_down_stops_it(self):
        ports = {name: peers.free_port() for name in ("OTLP_GRPC", "OTLP_HTTP", "JAEGER", "JAEGER_OTLP", "PROMETHEUS")}
        with tempfile.TemporaryDirectory(prefix="lens-stack-") as directory:
            env = {**os.environ, "LENS_STACK_DIR": directory,
                   **{f"LENS_STACK_{name}_PORT": str(port) for name, port in ports.items()}}
            stack = os.path.join(ROOT, "scripts", "stack.sh")
            up = subprocess.run([stack, "up"], env=env, capture_output=True, text=True, timeout=180)
            try:
                self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
                self.assertIn(f"127.0.0.1:{ports['OTLP_GRPC']}", up.stdout)
                again = subprocess.run([stack, "up"], env=env, capture_output=True, text=True, timeout=60)
                self.assertNotEqual(again.returncode, 0)
                self.assertIn("already runs", again.stderr)
                self.check_a_job(directory, ports)
            finally:
                down = subprocess.run([stack, "down"], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(down.returncode, 0, down.stdout + down.stderr)
            self.assertIn("3 stopped", down.stdout)
            self.assertFalse([p for p in ports.values() if peers.port_open(p)], "a port still open after down")

    def check_a_job(self, directory, ports):
        base_port = peers.free_port()  # each rank serves its metrics on base + its local rank
        while not all(peers.port_is_free(base_port + k) for k in range(4)):
            base_port = peers.free_port()
        prometheus = f"http://127.0.0.1:{ports['PROMETHEUS']}"
        jaeger = f"http://127.0.0.1:{ports['JAEGER']}"
        env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(peers.free_port()),
               "WORLD_SIZE": "4", "MEGATRON_OTEL_RUN_ID": "stack-run", "OTEL_SERVICE_NAME": "lens-stack",
               "MEGATRON_OTEL_EXPORTER": "otlp",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['OTLP_GRPC']}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_METRICS_EXPORTER": "prometheus",
               "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": str(base_port),
               "MEGATRON_OTEL_FILE_DIR": os.path.join(directory, "telemetry"), "MEGATRON_OTEL_HANG_SIGNAL": "none",
               "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks"}
        flags = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "32",
                 "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2", "--global-batch-size", "16",
                 "--train-iters", "100000", "--log-interval", "5", "--testing-slow-rank", SLOWED_RANK,
                 "--testing-slow-ms", "15", "--testing-slow-from", "41", "--otel-enabled"]
        ranks = [subprocess.Popen([TRAINER, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(4)]
        try:
            alert = self.poll(lambda: [a for a in query(prometheus, 'ALERTS{alertname="LensStraggler"}')
                                       if a["metric"]["alertstate"] == "firing"], ranks)
        finally:
            for r in ranks:
                r.send_signal(signal.SIGTERM)
            outputs = [r.communicate(timeout=120)[0] for r in ranks]
        self.assertEqual([r.returncode for r in ranks], [0] * 4, [o[-1500:] for o in outputs])
        self.assertEqual({(a["metric"]["dl_rank"], a["metric"]["host_name"]) for a in alert},
                         {(SLOWED_RANK, socket.gethostname())})
        self.assertTrue(query(prometheus, 'lens_progress_iteration{nemo_run_id="stack-run"}'))
        traces = self.poll(lambda: get(jaeger, "/api/traces?service=lens-stack&limit=20")["data"], [])
        ranks_seen = {tag["value"] for t in traces for p in t["processes"].values() for tag in p["tags"]
                      if tag["key"] == "dl.rank"}
        self.assertEqual(ranks_seen, {0, 1, 2, 3})
        self.assertTrue(os.path.getsize(os.path.join(directory, "files", "stack-run", "traces.jsonl")) > 0)

    def poll(self, found, ranks, seconds=150):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for r in ranks:
                if r.poll() is not None:
                    raise AssertionError(f"a rank ended ({r.returncode}): {r.communicate()[0][-3000:]}")
            try:
                result = found()
            except (urllib.error.URLError, OSError):
                result = None
            if result:
                return result
            time.sleep(1)
        raise AssertionError(f"nothing found within {seconds} s")


def query(base, expr):
    with urllib.request.urlopen(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=10) as r:
        return json.load(r)["data"]["result"]


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.load(r)


@unittest.skipUnless(TRAINER, "LENS_PRETRAIN_GPT names the trainer (set by ctest)")
class SlurmTest(unittest.TestCase):
    def test_the_batch_script_trains_as_sbatch_would_run_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir = os.path.join(tmp, "bin")
            os.makedirs(bin_dir)
            # srun's stand-in runs the step here, once (one node); scontrol's names this host.
            with open(os.path.join(bin_dir, "srun"), "w") as f:
                f.write("#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec \"$@\"\n")
            with open(os.path.join(bin_dir, "scontrol"), "w") as f:
                f.write("#!/bin/bash\necho 127.0.0.1\n")
            for name in ("srun", "scontrol"):
                os.chmod(os.path.join(bin_dir, name), 0o755)
            telemetry = os.path.join(tmp, "telemetry")
            env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": tmp, "SLURM_JOB_ID": "4242", "SLURM_NNODES": "1",
                   "SLURM_JOB_NODELIST": "localhost", "PRETRAIN_GPT": TRAINER, "NPROC_PER_NODE": "2",
                   "COLLECTOR": f"http://127.0.0.1:{peers.free_port()}", "TELEMETRY_DIR": telemetry,
                   "RDZV_PORT": str(peers.free_port()), "OMP_NUM_THREADS": "1",
                   "TRAIN_ARGS": "--pipeline-model-parallel-size 2 --num-layers 2 --hidden-size 32 "
                                 "--num-attention-heads 2 --seq-length 16 --micro-batch-size 2 "
                                 "--global-batch-size 8 --train-iters 25 --log-interval 5"}
            result = subprocess.run(["bash", os.path.join(DEPLOY, "slurm", "pretrain_gpt.sbatch")], env=env,
                                    capture_output=True, text=True, timeout=300, cwd=tmp)
            self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
            output = result.stdout + result.stderr
            self.assertIn("iteration       25/      25", output)
            # No Collector answers here: the exporting rank counted its spans dropped and trained on.
            self.assertRegex(output, r"lens: spans: (\d+) produced, 0 exported, \1 dropped")


if __name__ == "__main__":
    unittest.main()
