"""Real peers the tests start and stop: the OpenTelemetry Collector (otelcol-lens, tests/peers/otelcol) and Jaeger
(tests/peers/jaeger), both built by scripts/setup-deps.sh from pinned Go modules.

Each peer gets free loopback ports and a configuration written as JSON (a YAML document too, which is what both
read). A peer that exits or does not open its ports within its start-up time fails the test with its name and the
end of its log; none is left running: stop() ends it, and a test's tearDown calls it."""

import json
import os
import random
import pwd
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

PEERS_BIN = os.environ.get("LENS_PEERS_BIN", "")
OTELCOL = os.path.join(PEERS_BIN, "otelcol-lens")
JAEGER = os.path.join(PEERS_BIN, "jaeger")


_PORTS = random.Random()  # seeded from the OS: tests running side by side draw different ports


def ephemeral_ports():
    """The kernel's range of source ports for outgoing connections (32768-60999 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A loopback port nothing is bound to, drawn below the kernel's ephemeral range: a port the kernel hands out
    (bind to 0) is one it may give again as the source port of any connection before a peer binds it, and the peer
    then fails to start on "address already in use"."""
    low, _ = ephemeral_ports()
    for _ in range(1000):
        port = _PORTS.randrange(10000, low)
        if port_is_free(port):
            return port
    raise AssertionError(f"no free loopback port in 10000-{low - 1}")


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def read_tail(path, size=4000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"


class Peer:
    """A peer process: its config in `directory` (none when `config` is None: args says it all), its log in
    directory/<name>.log, ready when `ports` accept."""

    def __init__(self, name, program, directory, config, ports, start_seconds=60, env=None):
        self.name, self.program, self.directory, self.env = name, program, directory, env
        self.config_path = os.path.join(directory, f"{name}.json")
        self.log_path = os.path.join(directory, f"{name}.log")
        self.config, self.ports, self.start_seconds = config, ports, start_seconds
        self.args = [program, "--config", self.config_path]
        self.process = None

    def start(self):
        if not os.access(self.args[0], os.X_OK):
            raise AssertionError(f"{self.name}: {self.args[0]} is not there; run ./scripts/setup-deps.sh")
        if self.config is not None:
            with open(self.config_path, "w", encoding="utf-8") as f:
                json.dump(self.config, f, indent=1)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.args, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
                                        env={**os.environ, **(self.env or {})})
        log.close()
        deadline = time.monotonic() + self.start_seconds
        while not self.ready():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} failed to start (exit {self.process.returncode}); its log ends:\n"
                                     f"{read_tail(self.log_path)}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{self.name} did not open ports {self.ports} within {self.start_seconds} s; "
                                     f"its log ends:\n{read_tail(self.log_path)}")
            time.sleep(0.05)
        return self

    def ready(self):
        return all(port_open(p) for p in self.ports)

    def stop(self):
        """Ends the peer (SIGTERM: it flushes what it holds; SIGKILL after 30 s). Returns its exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=10)

    def log(self):
        return read_tail(self.log_path, 20000)


def endpoint(host_port, host="127.0.0.1"):
    return {"endpoint": f"{host}:{host_port}"}


class Collector(Peer):
    """otelcol-lens with the OTLP receiver (gRPC and HTTP, TLS when `tls` = (cert, key)), the memory limiter when
    `memory_limit_mib` is given, the batch processor, and per signal a file exporter (output/<signal>.jsonl, OTLP
    JSON a line) beside the debug exporter; with `prometheus`, the Prometheus exporter on its own port too.
    `same_ports_as`: another Collector whose OTLP ports this one takes (a restart). `forward_traces_to`: the OTLP/gRPC
    port of a peer (Jaeger) the traces are also sent to, by the Collector's OTLP exporter. `host`: the address its
    receivers listen on."""

    def __init__(self, directory, tls=None, memory_limit_mib=None, prometheus=False, output="output",
                 same_ports_as=None, forward_traces_to=None, host="127.0.0.1"):
        self.grpc_port, self.http_port = ((same_ports_as.grpc_port, same_ports_as.http_port) if same_ports_as
                                          else (free_port(), free_port()))
        self.prometheus_port = free_port() if prometheus else None
        self.output = os.path.join(directory, output)
        os.makedirs(self.output, exist_ok=True)
        protocols = {"grpc": endpoint(self.grpc_port, host), "http": endpoint(self.http_port, host)}
        if tls:
            for p in protocols.values():
                p["tls"] = {"cert_file": tls[0], "key_file": tls[1]}
        processors = {"batch": {"timeout": "200ms"}}
        chain = ["batch"]
        if memory_limit_mib is not None:
            processors["memory_limiter"] = {"check_interval": "100ms", "limit_mib": memory_limit_mib,
                                            "spike_limit_mib": 0}
            chain = ["memory_limiter", "batch"]
        exporters = {"debug": {"verbosity": "basic"}}
        pipelines = {}
        for signal_name in ("traces", "metrics", "logs"):
            exporters[f"file/{signal_name}"] = {"path": os.path.join(self.output, f"{signal_name}.jsonl"),
                                                "format": "json"}
            pipelines[signal_name] = {"receivers": ["otlp"], "processors": chain,
                                      "exporters": [f"file/{signal_name}", "debug"]}
        if prometheus:
            exporters["prometheus"] = {"endpoint": f"127.0.0.1:{self.prometheus_port}"}
            pipelines["metrics"]["exporters"].append("prometheus")
        if forward_traces_to is not None:
            exporters["otlp/forward"] = {"endpoint": f"127.0.0.1:{forward_traces_to}", "tls": {"insecure": True}}
            pipelines["traces"]["exporters"].append("otlp/forward")
        config = {"receivers": {"otlp": {"protocols": protocols}}, "processors": processors, "exporters": exporters,
                  "service": {"pipelines": pipelines, "telemetry": {"metrics": {"level": "none"}}}}
        ports = [self.grpc_port, self.http_port] + ([self.prometheus_port] if prometheus else [])
        super().__init__("otelcol-lens", OTELCOL, directory, config, ports)

    def read(self, signal_name):
        """Every OTLP JSON request the file exporter wrote for `signal_name`, in order."""
        path = os.path.join(self.output, f"{signal_name}.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")[:-1]  # whole lines only: the Collector may be writing the last one
        return [json.loads(line) for line in lines if line.strip()]


class Jaeger(Peer):
    """Jaeger v1.76.0's all-in-one program (the Collector-based jaeger binary): the OTLP receiver (gRPC and HTTP),
    the batch processor, in-memory storage, and the query service (its HTTP API at query_url)."""

    def __init__(self, directory):
        self.grpc_port, self.http_port, self.query_port = free_port(), free_port(), free_port()
        self.query_grpc_port = free_port()
        self.query_url = f"http://127.0.0.1:{self.query_port}"
        config = {
            "service": {"extensions": ["jaeger_storage", "jaeger_query"],
                        "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                                 "exporters": ["jaeger_storage_exporter"]}},
                        "telemetry": {"metrics": {"level": "none"}}},
            "extensions": {"jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
                           "jaeger_query": {"storage": {"traces": "memstore"},
                                            "http": endpoint(self.query_port), "grpc": endpoint(self.query_grpc_port)}},
            "receivers": {"otlp": {"protocols": {"grpc": endpoint(self.grpc_port), "http": endpoint(self.http_port)}}},
            "processors": {"batch": {"timeout": "200ms"}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }
        # Its own traces off: by default it sends them to 127.0.0.1:4317, where another test's receiver may listen.
        super().__init__("jaeger", JAEGER, directory, config, [self.grpc_port, self.http_port, self.query_port],
                         env={"OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"})

    def get(self, path):
        with urllib.request.urlopen(self.query_url + path, timeout=30) as response:
            return json.load(response)


class Prometheus(Peer):
    """Debian's Prometheus server scraping `targets` ({job: port on 127.0.0.1}) and the targets its file service
    discovery finds every second; query() asks its
    HTTP API. The first scraped sample is queryable about 6 s after the start."""

    def __init__(self, program, directory, targets, file_sd=None, user=None):
        """`file_sd`: {job: a glob of file service discovery files}, read every second. `user`: run as that user
        (as Debian's package runs it, as `prometheus`), its home given to it; needs root."""
        self.port = free_port()
        home = os.path.join(directory, "prometheus")
        os.makedirs(home, exist_ok=True)
        jobs = "".join(f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
                       for job, port in targets.items())
        jobs += "".join(f"  - job_name: {job}\n    file_sd_configs:\n      - files: ['{glob}']\n"
                        "        refresh_interval: 1s\n"
                        for job, glob in (file_sd or {}).items())
        config = os.path.join(home, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}")
        super().__init__("prometheus", program, home, None, [self.port])
        self.args = [program, f"--config.file={config}", f"--storage.tsdb.path={home}/data",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        if user is not None:
            record = pwd.getpwnam(user)
            for path in (home, config):
                os.chown(path, record.pw_uid, record.pw_gid)
            self.args = ["/usr/bin/setpriv", f"--reuid={record.pw_uid}", f"--regid={record.pw_gid}", "--clear-groups",
                         *self.args]

    def start(self):
        """Started, and ready: its port opens before its storage is, and until then a query is a 503."""
        super().start()
        deadline = time.monotonic() + self.start_seconds
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus: not ready after {self.start_seconds} s; see {self.log_path}")
            time.sleep(0.1)

    def query(self, promql):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)["data"]["result"]


def run_ranks(trainer, flags, world, env, cwd):
    """`trainer` on `world` ranks launched as torchrun would (RANK, WORLD_SIZE, MASTER_*), every rank exporting;
    returns each rank's output, or fails with the ends of them when a rank fails."""
    base = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "MEGATRON_OTEL_RANK_STRATEGY": "all_ranks",
            "MEGATRON_OTEL_HANG_SIGNAL": "none", "OTEL_BSP_SCHEDULE_DELAY": "200", **env}
    ranks = [subprocess.Popen([trainer, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=cwd, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(world)]
    outputs = [r.communicate(timeout=300)[0] for r in ranks]
    if any(r.returncode != 0 for r in ranks):
        raise AssertionError("\n".join(o[-2000:] for o in outputs))
    return outputs


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1 and localhost (openssl): (cert, key); the cert is its own CA."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


class PeerTest(unittest.TestCase):
    """A test with a temporary directory and the peers it started, stopped at its end whatever happened."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.peers = []

    def start(self, peer):
        self.peers.append(peer)
        return peer.start()

    def tearDown(self):
        for peer in self.peers:
            peer.stop()
        self.tmp.cleanup()
