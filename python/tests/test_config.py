"""Configuration, span groups and setup: NemoLensConfig.from_env gives what the C++ library gives for the same
environment (every field, every resolution, every error message), SpanGroup catalogues, and setup's rules."""

import json
import os
import subprocess
import tempfile
import unittest

import lens
from lens.megatron import MegatronSpanGroup, config_from_env
from support import Run, environment

FIELDS = ("enabled", "service_name", "span_groups", "span_groups_source", "rank_strategy", "export_rank",
          "export_sample_rate", "sampling_strategy", "traces_enabled", "metrics_enabled", "logs_enabled", "exporter",
          "file_dir", "trace_layout", "span_names", "run_id", "user_id", "sdk_disabled", "traces_sampler",
          "traces_sampler_ratio", "metric_export_interval_ms", "traces_exporter", "metrics_exporter",
          "logs_exporter", "prometheus_host", "prometheus_port", "propagate_trace_context", "otlp_traces_endpoint",
          "otlp_traces_protocol", "span_batch", "resource_attributes")

# Environments for the parity test: good values of every kind, the prefix fallback, and bad values of every kind.
ENVIRONMENTS = [
    {},
    {"P_ENABLED": "1"},
    {"P_ENABLED": "yes", "P_SPAN_GROUPS": "per_step, layer", "P_RANK_STRATEGY": "all_ranks"},
    {"P_ENABLED": "on", "P_SPAN_GROUPS": "all,-layer,-microbatch", "P_EXPORTER": "file", "P_FILE_DIR": "/tmp/t"},
    {"F_ENABLED": "1", "F_SPAN_GROUPS": "default", "F_RUN_ID": "run-7"},
    {"P_ENABLED": "0", "F_ENABLED": "1"},
    {"P_EXPORT_RANK": "3", "P_EXPORT_SAMPLE_RATE": "0.25", "P_SAMPLING_STRATEGY": "rank_aware"},
    {"P_TRACES_ENABLED": "false", "P_METRICS_ENABLED": "0", "P_LOGS_ENABLED": "1", "P_USER_ID": "team-a"},
    {"P_TRACE_LAYOUT": "step", "P_SPAN_NAMES": "megatron"},
    {"OTEL_SERVICE_NAME": "trainer", "OTEL_SDK_DISABLED": "true"},
    {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_MAX_QUEUE_SIZE": "4096", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "128"},
    {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "9999", "OTEL_TRACES_EXPORTER": "none"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/v1/traces", "OTEL_PROPAGATORS": "none"},
    {"OTEL_RESOURCE_ATTRIBUTES": "team=a,cluster=b", "OTEL_METRIC_EXPORT_INTERVAL": "500"},
    # bad values: each must give the same error text from both languages
    {"P_ENABLED": "maybe"},
    {"P_EXPORT_SAMPLE_RATE": "2"},
    {"P_EXPORT_RANK": "last"},
    {"P_EXPORTER": "kafka"},
    {"P_TRACE_LAYOUT": "iteration"},
    {"P_ENABLED": "1", "P_SPAN_GROUPS": "per_stpe"},
    {"P_ENABLED": "1", "P_SPAN_GROUPS": "all,-lyer"},
    {"OTEL_SDK_DISABLED": "maybe"},
    {"OTEL_TRACES_SAMPLER": "sometimes"},
    {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
    {"OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
    {"OTEL_BSP_SCHEDULE_DELAY": "forever"},
    {"OTEL_EXPORTER_OTLP_PROTOCOL": "xml"},
    {"OTEL_EXPORTER_OTLP_HEADERS": "authorization"},
    {"OTEL_METRICS_EXPORTER": "zipkin"},
    {"OTEL_PROPAGATORS": "b3"},
    {"OTEL_EXPORTER_PROMETHEUS_PORT": "99999"},
]


def cpp_view(mode, prefix, fallback):
    out = subprocess.run([os.environ["LENS_CONFIG_DUMP"], mode, prefix, fallback], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def python_view(mode, prefix, fallback):
    try:
        if mode == "megatron":
            config = config_from_env()
        else:
            config = lens.NemoLensConfig.from_env(prefix=prefix, fallback_prefix=fallback)
    except lens.ConfigError as error:
        return {"error": str(error)}
    view = {"fields": {}}
    for name in FIELDS:
        value = getattr(config, name)
        view["fields"][name] = list(value) if isinstance(value, tuple) else value
    try:
        view["resolved"] = ",".join(config.span_group_cls.group_order()[i] for i in sorted(
            config.span_group_cls.group_order().index(g) for g in config.resolved_span_groups))
    except lens.ConfigError as error:
        view["resolve_error"] = str(error)
    return view


class ConfigParityTest(unittest.TestCase):
    def check(self, mode, prefix, fallback, renamed):
        for env in ENVIRONMENTS:
            variables = {key.replace("P_", renamed[0], 1).replace("F_", renamed[1], 1)
                         if key.startswith(("P_", "F_")) else key: value for key, value in env.items()}
            with self.subTest(mode=mode, env=variables), environment(**variables):
                self.assertEqual(python_view(mode, prefix, fallback), cpp_view(mode, prefix, fallback))

    def test_a_consumer_prefix_with_a_fallback(self):
        self.check("base", "LENSTEST", "NEMO_LENS", ("LENSTEST_", "NEMO_LENS_"))

    def test_the_megatron_configuration(self):
        self.check("megatron", "MEGATRON_OTEL", "NEMO_LENS", ("MEGATRON_OTEL_", "NEMO_LENS_"))

    def test_no_fallback_prefix(self):
        with environment(NEMO_LENS_ENABLED="1", LENSTEST_ENABLED="1"):
            self.assertFalse(lens.NemoLensConfig.from_env(prefix="LENSTEST_X").enabled)
            self.assertTrue(lens.NemoLensConfig.from_env().enabled)

    def test_fields_can_be_set_as_megatron_does_and_bad_ones_are_refused(self):
        config = lens.NemoLensConfig(enabled=True, service_name="megatron-lm", span_groups="per_step")
        self.assertTrue(config.active)
        config.exporter = "console"
        self.assertEqual(config.exporter, "console")
        with self.assertRaisesRegex(ValueError, "exporter='kafka' is invalid"):
            config.exporter = "kafka"
        with self.assertRaises(TypeError):
            lens.NemoLensConfig(no_such_field=1)


class SpanGroupTest(unittest.TestCase):
    def test_the_base_catalogue_is_the_cpp_one(self):
        groups, presets = lens._native.base_catalogue()
        self.assertEqual(lens.SpanGroup.group_order(), groups)
        self.assertEqual({n: sorted(m) for n, m in presets},
                         {n: sorted(m) for n, m in lens.SpanGroup._PRESETS.items()})

    def test_megatron_span_group_is_the_cpp_catalogue(self):
        groups, presets = lens._native.megatron_catalogue()
        self.assertEqual(MegatronSpanGroup.group_order(), groups)
        self.assertEqual(MegatronSpanGroup.LAYER, "layer")
        self.assertEqual(MegatronSpanGroup.STEP, "step")
        self.assertEqual(MegatronSpanGroup.resolve("default"),
                         {"job", "checkpoint", "evaluate", "first_iteration", "inference"})
        self.assertEqual(MegatronSpanGroup.resolve("all,-layer"), MegatronSpanGroup.ALL_GROUPS - {"layer"})

    def test_a_subclass_adds_groups_and_replaces_presets(self):
        class MySpanGroup(lens.SpanGroup):
            DATA = "data"
            ALL_GROUPS = lens.SpanGroup.ALL_GROUPS | {DATA}
            _PRESETS = {"default": frozenset({lens.SpanGroup.JOB, DATA}), "all": ALL_GROUPS}

        self.assertEqual(MySpanGroup.group_order()[-1], "data")
        self.assertEqual(MySpanGroup.resolve("default"), {"job", "data"})
        with self.assertRaisesRegex(lens.ConfigError, "per_step"):
            MySpanGroup.resolve("per_step")  # replaced presets: the base ones are gone
        with Run("default", group_cls=MySpanGroup):
            self.assertTrue(lens.is_span_group_enabled("data"))
            self.assertFalse(lens.is_span_group_enabled("step"))

    def test_an_unknown_name_names_the_source_and_the_closest(self):
        with self.assertRaises(lens.ConfigError) as caught:
            MegatronSpanGroup.resolve("per_step,layr", "--otel-span-groups")
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIn("--otel-span-groups", str(caught.exception))
        self.assertIn("layer", str(caught.exception))


class SetupTest(unittest.TestCase):
    def test_a_second_enabled_setup_is_a_runtime_error_unless_allowed(self):
        with Run("default") as run, environment(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="console"):
            config = lens.NemoLensConfig.from_env()
            with self.assertRaisesRegex(RuntimeError, "_allow_reinit"):
                lens.setup_telemetry(config, rank=0, world_size=1)
            self.assertTrue(run.handle.is_exporting)
            disabled = lens.NemoLensConfig()
            self.assertFalse(lens.setup_telemetry(disabled).is_exporting)  # a disabled one is no conflict

    def test_what_is_not_an_sdk_exporter_or_reader_is_refused(self):
        with self.assertRaisesRegex(TypeError, "span_exporter: an OpenTelemetry SDK SpanExporter"):
            lens.setup_telemetry(lens.NemoLensConfig(), span_exporter=object())
        with self.assertRaisesRegex(TypeError, "metric_reader: an OpenTelemetry SDK MetricReader"):
            lens.setup_telemetry(lens.NemoLensConfig(), metric_reader=42)

    def test_export_strategy_callable_and_registered(self):
        seen = []

        def odd_ranks(info):
            seen.append((info.rank, info.world_size))
            return info.rank % 2 == 1

        with environment(NEMO_LENS_HANG_SIGNAL="none"):  # a non-exporting rank that keeps no positions: nothing on
            config = lens.NemoLensConfig.from_env()
            config.enabled, config.exporter = True, "console"
            handle = lens.setup_telemetry(config, rank=2, world_size=4, export_strategy=odd_ranks, _allow_reinit=True)
            self.assertFalse(handle.is_exporting)
            self.assertFalse(lens.is_span_group_enabled("job"))
            handle.shutdown()
            lens.register_export_strategy("python_test_rank_one", lambda info: info.rank == 1)
            config.rank_strategy = "python_test_rank_one"
            handle = lens.setup_telemetry(config, rank=1, world_size=4, _allow_reinit=True)
            self.assertTrue(handle.is_exporting)
            handle.shutdown()
        self.assertEqual(seen, [(2, 4)])
        with self.assertRaisesRegex(lens.ConfigError, "python_test_missing"):
            lens.setup_telemetry(lens.NemoLensConfig(enabled=True, rank_strategy="python_test_missing"),
                                 rank=0, world_size=1, _allow_reinit=True)

    def test_a_python_sampling_strategy_composes_native_samplers(self):
        lens.register_sampling_strategy("python_test_none",
                                        lambda i: lens.sampling.rank_gate(False, i.sdk_sampler), allow_override=True)
        with Run("all", NEMO_LENS_SAMPLING_STRATEGY="python_test_none") as run:
            with lens.managed_span("job", "sampled_out"):
                pass
            self.assertEqual(run.handle.span_stats()["sampled_out"], 1)
        self.assertEqual(run.spans, [])

    def test_set_enabled_span_groups(self):
        with Run("default", group_cls=MegatronSpanGroup):
            self.assertEqual(lens.set_enabled_span_groups({"layer", "job"}), {"layer", "job"})
            self.assertTrue(lens.is_span_group_enabled(MegatronSpanGroup.LAYER))
            self.assertEqual(lens.set_enabled_span_groups("per_step,-communication"),
                             MegatronSpanGroup.resolve("per_step") - {"communication"})
            with self.assertRaisesRegex(ValueError, "unknown span group"):
                lens.set_enabled_span_groups("job,lyer")  # a spec names the catalogue's groups (any name in a set)


RUN_ID_PROBE = """
import os, lens
os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="console", NEMO_LENS_METRICS_ENABLED="0",
                  NEMO_LENS_RANK_STRATEGY="all_ranks", NEMO_LENS_HANG_SIGNAL="none")
handle = lens.setup_telemetry(lens.NemoLensConfig.from_env())
# One file a rank: the console exporter's writes from three processes to one pipe interleave with a print.
with open(os.path.join(os.environ["RUN_ID_DIR"], os.environ["RANK"]), "w", encoding="utf-8") as f:
    f.write(handle.run_id)
handle.shutdown()
"""


class TorchrunRunIdTest(unittest.TestCase):
    """A Python job under plain torchrun (TORCHELASTIC_RUN_ID=none) has one run id on every rank, as pretrain_gpt
    shares rank 0's: the ranks agree through torchrun's agent store."""

    def run_ids(self):
        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, "probe.py")
            with open(probe, "w", encoding="utf-8") as f:
                f.write(RUN_ID_PROBE)
            env = {k: v for k, v in os.environ.items() if not k.endswith("_RUN_ID") and k != "SLURM_JOB_ID"}
            env["RUN_ID_DIR"] = tmp
            # torch 1.13's torchrun fails without --redirects/--tee; "9:0" (no local rank 9) redirects nothing.
            result = subprocess.run(["torchrun", "--nproc_per_node", "3", "--redirects", "9:0", "--tee", "9:0",
                                     "--monitor_interval", "0.2", "--master_port", str(free_port()), probe],
                                    capture_output=True, text=True, timeout=180, env=env)
            self.assertEqual(result.returncode, 0, result.stdout[-2000:] + result.stderr[-2000:])
            return {rank: read_text(os.path.join(tmp, rank)) for rank in os.listdir(tmp) if rank.isdigit()}

    def test_every_rank_of_a_torchrun_job_has_one_run_id_and_the_next_job_another(self):
        first, second = self.run_ids(), self.run_ids()
        self.assertEqual(sorted(first), ["0", "1", "2"])
        self.assertEqual(len(set(first.values())), 1, first)
        self.assertEqual(len(set(second.values())), 1, second)
        self.assertNotEqual(set(first.values()), set(second.values()))


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    unittest.main()
