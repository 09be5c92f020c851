"""What the Python tests share: an environment set for one block, and a telemetry setup that writes real files
(the file exporter) and reads them back once shut down."""

import contextlib
import glob
import json
import os
import tempfile

import lens

LENS_KEYS = ("ENABLED", "SPAN_GROUPS", "EXPORTER", "FILE_DIR", "LOGS_ENABLED", "METRICS_ENABLED", "TRACES_ENABLED",
             "RANK_STRATEGY", "EXPORT_RANK", "RUN_ID", "SAMPLING_STRATEGY", "EXPORT_SAMPLE_RATE", "TRACE_LAYOUT",
             "SPAN_NAMES", "USER_ID")


@contextlib.contextmanager
def environment(clear_prefixes=("NEMO_LENS_", "MEGATRON_OTEL_", "OTEL_", "LENSTEST_"), **variables):
    """Sets `variables` (None: unset) for the block, with every lens and OTEL_ variable cleared first."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(clear_prefixes):
            del os.environ[key]
    for key, value in variables.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def attributes(item):
    """An OTLP/JSON attribute list as a dict of Python values."""
    out = {}
    for attribute in item.get("attributes", []):
        value = attribute["value"]
        kind, raw = next(iter(value.items()))
        if kind == "intValue":
            raw = int(raw)
        elif kind == "arrayValue":
            raw = [next(iter(v.values())) for v in raw.get("values", [])]
        out[attribute["key"]] = raw
    return out


def json_lines(directory, signal):
    """Every OTLP/JSON document of one signal under a telemetry directory (every run and rank)."""
    for path in sorted(glob.glob(os.path.join(directory, "*", f"*.{signal}.jsonl"))):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)


class Run:
    """A setup with the file exporter in a temporary directory, shut down (and its files read) at exit.

    with Run("all") as run: ...   then run.spans, run.span("name"), run.logs, run.metrics"""

    def __init__(self, groups="all", group_cls=None, rank=0, world_size=1, **env):
        self.groups = groups
        self.group_cls = group_cls
        self.rank = rank
        self.world_size = world_size
        self.env = env
        self.spans, self.logs, self.metrics, self.resources = [], [], [], []
        self.scopes = {}  # span id -> (instrumentation scope name, version or None)

    def __enter__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="lens-python-test-")
        variables = dict(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=self._dir.name,
                         NEMO_LENS_SPAN_GROUPS=self.groups, NEMO_LENS_RANK_STRATEGY="all_ranks",
                         OTEL_BSP_SCHEDULE_DELAY="50")
        self._env = environment(**{**variables, **self.env})
        self._env.__enter__()
        config = lens.NemoLensConfig.from_env(span_group_cls=self.group_cls)
        self.handle = lens.setup_telemetry(config, rank=self.rank, world_size=self.world_size, _allow_reinit=True)
        return self

    def __exit__(self, *exc):
        self.handle.shutdown()
        self._env.__exit__(*exc)
        self.read(self._dir.name)
        self._dir.cleanup()
        return False

    def read(self, directory):
        for document in json_lines(directory, "traces"):
            for resource_spans in document["resourceSpans"]:
                self.resources.append(attributes(resource_spans["resource"]))
                for scope in resource_spans["scopeSpans"]:
                    self.spans.extend(scope["spans"])
                    for span in scope["spans"]:
                        self.scopes[span["spanId"]] = (scope["scope"]["name"], scope["scope"].get("version"))
        for document in json_lines(directory, "logs"):
            for resource_logs in document["resourceLogs"]:
                for scope in resource_logs["scopeLogs"]:
                    self.logs.extend(scope["logRecords"])
        for document in json_lines(directory, "metrics"):
            for resource_metrics in document["resourceMetrics"]:
                for scope in resource_metrics["scopeMetrics"]:
                    self.metrics.extend(scope["metrics"])

    def named(self, name):
        return [s for s in self.spans if s["name"] == name]

    def span(self, name):
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s['name'] for s in self.spans]}"
        return found[0]

    def metric(self, name):
        found = [m for m in self.metrics if m["name"] == name]
        assert found, f"no metric {name!r}: {sorted({m['name'] for m in self.metrics})}"
        return found[-1]
