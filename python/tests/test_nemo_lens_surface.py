"""NeMo Lens's public surface on lens: every name its `__init__` exports and every module Megatron-LM and
NeMo code import, through the compat shim and as lens's own names; the config's field names and defaults; errors
of the same type at the same moments; export strategies of the form (config, rank, world_size); the default
redaction; the rank-aware sampler; resource detection; the span-group registry."""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import lens
import lens.compat.nemo_lens  # noqa: F401: nemo.lens is lens from here on
from support import Run, attributes, environment, json_lines

# NeMo Lens's __init__ exports (its main branch, and the registry branch's additions).
NEMO_LENS_NAMES = [
    "__version__", "__package_name__", "__contact_names__", "__contact_emails__", "__homepage__",
    "__repository_url__", "__download_url__", "NemoLensConfig", "SpanGroup", "SpanRegistry", "TelemetryHandle",
    "setup_telemetry", "span_cm", "managed_span", "trace_fn", "safe_set_span_attributes", "redact_value",
    "DEFAULT_REDACT_KEYS", "inject_context", "extract_context", "encode_resource_attributes", "get_tracer",
    "get_meter", "is_span_group_enabled", "set_enabled_span_groups", "enabled_span_groups", "pending_span_groups",
    "broadcast_trace_context", "create_linked_span", "ExportStrategy", "register_export_strategy",
    "registered_strategies", "unregister_export_strategy",
]

NEMO_LENS_MODULES = {
    "config": ["NemoLensConfig"], "groups": ["SpanGroup", "SpanRegistry"],
    "helpers": ["managed_span", "trace_fn", "span_cm", "safe_set_span_attributes", "redact_value",
                "DEFAULT_REDACT_KEYS"],
    "handle": ["TelemetryHandle", "setup_telemetry"],
    "state": ["is_span_group_enabled", "set_enabled_span_groups", "enabled_span_groups", "pending_span_groups",
              "set_pp_trace_carrier", "get_pp_trace_carrier"],
    "distributed": ["broadcast_trace_context", "create_linked_span"],
    "propagation": ["inject_context", "extract_context"],
    "strategies": ["ExportStrategy", "BUILTIN_STRATEGIES", "register_export_strategy", "unregister_export_strategy",
                   "get_export_strategy", "registered_strategies"],
    "sampling": ["RankAwareSampler"],
    "resources": ["detect_resource", "detect_slurm", "detect_kubernetes", "detect_local",
                  "encode_resource_attributes"],
    "resources.local": ["detect_local"], "resources.slurm": ["detect_slurm"],
    "resources.kubernetes": ["detect_kubernetes"],
    "semconv": ["SEMCONV_VERSION", "DL_RANK", "DL_ITERATION", "GENAI_REQUEST_MODEL", "RL_REWARD", "GYM_SERVER_NAME",
                "SLURM_JOB_ID", "NEMO_RUN_ID", "NEMO_SPAN_TRUNCATED", "WANDB_PROJECT"],
    "logging_bridge": ["setup_logging_bridge"],
    "fallbacks": ["managed_span", "trace_fn", "span_cm", "is_span_group_enabled", "safe_set_span_attributes"],
    "package_info": ["__version__", "__package_name__"],
}

# NeMo Lens's NemoLensConfig() field defaults.
NEMO_LENS_DEFAULTS = {
    "enabled": False, "service_name": "nemo", "export_strategy": "single_rank", "export_rank": -1,
    "export_sample_rate": 1.0, "sampler_enabled": False, "traces_enabled": True, "metrics_enabled": True,
    "logs_enabled": False, "span_groups": "default", "exporter": "otlp", "run_id": "", "user": "",
    "wandb_entity": "", "wandb_project": "",
}


class NamesTest(unittest.TestCase):
    def test_every_name_of_nemo_lens_init_from_nemo_lens_and_from_lens(self):
        import nemo.lens
        for name in NEMO_LENS_NAMES:
            self.assertTrue(hasattr(nemo.lens, name), name)
            self.assertIn(name, lens.__all__)

    def test_every_module_and_its_names(self):
        import importlib
        for module, names in NEMO_LENS_MODULES.items():
            imported = importlib.import_module(f"nemo.lens.{module}")
            for name in names:
                self.assertTrue(hasattr(imported, name), f"nemo.lens.{module}.{name}")

    def test_get_tracer_and_get_meter_are_lens_s(self):
        self.assertIsInstance(lens.get_tracer(), lens.Tracer)
        self.assertTrue(callable(lens.get_meter("x").create_counter))


class ConfigTest(unittest.TestCase):
    def test_field_names_and_defaults_are_nemo_lens_s(self):
        with environment():
            for config in (lens.NemoLensConfig(), lens.NemoLensConfig.from_env()):
                for name, default in NEMO_LENS_DEFAULTS.items():
                    self.assertEqual(getattr(config, name), default, name)

    def test_nemo_lens_names_are_lens_s_settings(self):
        config = lens.NemoLensConfig(export_strategy="all_ranks", sampler_enabled=True, user="team-a")
        self.assertEqual((config.rank_strategy, config.sampling_strategy, config.user_id),
                         ("all_ranks", "rank_aware", "team-a"))
        with environment(NEMO_LENS_EXPORT_STRATEGY="first_rank_per_node", NEMO_LENS_SAMPLER_ENABLED="1",
                         WANDB_ENTITY="nv", WANDB_PROJECT="gpt"):
            config = lens.NemoLensConfig.from_env()
        self.assertEqual((config.export_strategy, config.sampler_enabled, config.wandb_entity, config.wandb_project),
                         ("first_rank_per_node", True, "nv", "gpt"))
        copied = config.copy()
        self.assertEqual((copied.wandb_entity, copied.wandb_project), ("nv", "gpt"))

    def test_validation_errors_have_nemo_lens_s_type_at_its_moments(self):
        with self.assertRaisesRegex(ValueError, r"export_sample_rate must be in \[0.0, 1.0\]"):
            lens.NemoLensConfig(export_sample_rate=1.5)
        # Set afterwards (as Megatron sets fields): a NaN rate would export on no rank, so it is refused too.
        config = lens.NemoLensConfig()
        for bad in (math.nan, -0.5, 1.5, math.inf):
            with self.assertRaisesRegex(ValueError, r"export_sample_rate must be in \[0.0, 1.0\]"):
                config.export_sample_rate = bad
            with self.assertRaisesRegex(ValueError, r"traces_sampler_ratio must be in \[0.0, 1.0\]"):
                config.traces_sampler_ratio = bad
        self.assertEqual(config.export_sample_rate, 1.0)
        config.export_sample_rate = 0.25
        self.assertEqual(config.export_sample_rate, 0.25)
        with environment(NEMO_LENS_ENABLED="maybe"), self.assertRaises(ValueError):
            lens.NemoLensConfig.from_env()
        with environment(NEMO_LENS_EXPORT_SAMPLE_RATE="2"), self.assertRaises(ValueError):
            lens.NemoLensConfig.from_env()
        with self.assertRaises(TypeError):
            lens.NemoLensConfig(no_such_field=1)


class StrategiesTest(unittest.TestCase):
    def test_register_use_and_unregister_a_strategy_of_nemo_lens_s_form(self):
        from nemo.lens.strategies import (BUILTIN_STRATEGIES, get_export_strategy, register_export_strategy,
                                          registered_strategies, unregister_export_strategy)
        seen = []

        def last_two(config, rank, world_size):
            seen.append((type(config).__name__, config.service_name, rank, world_size))
            return rank >= world_size - 2

        register_export_strategy("surface_last_two", last_two)
        try:
            self.assertIn("surface_last_two", registered_strategies())
            self.assertTrue(BUILTIN_STRATEGIES <= set(registered_strategies()))
            with self.assertRaisesRegex(ValueError, "already registered"):
                register_export_strategy("surface_last_two", last_two)
            with environment(NEMO_LENS_HANG_SIGNAL="none"):
                config = lens.NemoLensConfig(enabled=True, exporter="console", export_strategy="surface_last_two",
                                             service_name="svc", metrics_enabled=False)
                handle = lens.setup_telemetry(config, rank=2, world_size=4, _allow_reinit=True)
                self.assertTrue(handle.is_exporting)
                handle.shutdown()
            self.assertEqual(seen, [("NemoLensConfig", "svc", 2, 4)])
            self.assertFalse(get_export_strategy("surface_last_two")(config, 0, 4))
            self.assertTrue(get_export_strategy("single_rank")(lens.NemoLensConfig(export_rank=-1), 3, 4))
        finally:
            unregister_export_strategy("surface_last_two")
        with self.assertRaisesRegex(ValueError, "built-in"):
            unregister_export_strategy("all_ranks")
        with self.assertRaisesRegex(ValueError, "not registered"):
            unregister_export_strategy("surface_last_two")
        with self.assertRaisesRegex(ValueError, "Unknown export_strategy"):
            get_export_strategy("surface_missing")
        with self.assertRaises(TypeError):
            register_export_strategy("surface_not_callable", 42)
        with self.assertRaises(ValueError):
            register_export_strategy("", last_two)

    def test_setup_s_export_strategy_callable_of_nemo_lens_s_form(self):
        with environment(NEMO_LENS_HANG_SIGNAL="none"):
            config = lens.NemoLensConfig(enabled=True, exporter="console", metrics_enabled=False)
            handle = lens.setup_telemetry(config, rank=3, world_size=4, _allow_reinit=True,
                                          export_strategy=lambda config, rank, world_size: rank == 3)
            self.assertTrue(handle.is_exporting)
            handle.shutdown()

    def test_a_strategy_that_raises_fails_setup_with_its_error(self):
        def broken(config, rank, world_size):
            raise RuntimeError("strategy broke")

        with environment(NEMO_LENS_HANG_SIGNAL="none"), self.assertRaisesRegex(RuntimeError, "strategy broke"):
            lens.setup_telemetry(lens.NemoLensConfig(enabled=True, exporter="console"), rank=0, world_size=1,
                                 export_strategy=broken, _allow_reinit=True)


class RedactionTest(unittest.TestCase):
    def test_the_default_redaction_of_managed_span_span_cm_and_safe_set_span_attributes(self):
        from nemo.lens.helpers import DEFAULT_REDACT_KEYS, redact_value
        self.assertEqual(DEFAULT_REDACT_KEYS, frozenset(
            {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}))
        self.assertEqual(redact_value("token", "abc"), "[REDACTED]")
        self.assertEqual(redact_value("model", "gpt"), "gpt")
        with Run("all") as run:
            with lens.managed_span("step", "redacted", prompt="tell me", n=3, token=7) as span:
                lens.safe_set_span_attributes(span, {"secret": "s3", "model": "gpt"})
                lens.safe_set_span_attributes(span, {"model_key": "kept"}, redact_keys=frozenset({"model"}))
                span.set_attribute("text", "set directly")  # the Span API records what it is given
            with lens.span_cm("cm", key="k"):
                pass
        self.assertEqual(attributes(run.span("redacted")), {
            "prompt": "[REDACTED]", "n": 3, "token": 7, "secret": "[REDACTED]", "model": "gpt",
            "model_key": "kept", "text": "set directly"})
        self.assertEqual(attributes(run.span("cm")), {"key": "[REDACTED]"})


class SamplerResourcesRegistryTest(unittest.TestCase):
    def test_the_rank_aware_sampler_decides_as_the_sampled_strategy(self):
        from nemo.lens.sampling import RankAwareSampler
        sampled = lens.strategies.get_export_strategy("sampled")
        for rank in range(16):
            config = lens.NemoLensConfig(export_sample_rate=0.5)
            self.assertEqual(RankAwareSampler(rank, 16, 0.5).should_sample(), sampled(config, rank, 16), rank)
        self.assertTrue(RankAwareSampler(0, 1, 1.0).should_sample())
        self.assertFalse(RankAwareSampler(0, 1, 0.0).should_sample())
        self.assertIn("rate=0.5", RankAwareSampler(0, 1, 0.5).get_description())

    def test_resources_are_what_setup_detects(self):
        from nemo.lens.resources import detect_kubernetes, detect_local, detect_resource, detect_slurm
        with environment(SLURM_JOB_ID="4242", SLURM_JOB_NAME="gpt", CUDA_VISIBLE_DEVICES="0,1"):
            self.assertEqual(detect_slurm(), {"slurm.job.id": "4242", "slurm.job.name": "gpt"})
            local = detect_local()
            self.assertEqual((local["process.pid"], local["host.gpu.count"]), (os.getpid(), 2))
            self.assertEqual(detect_kubernetes(), {})
            self.assertEqual(detect_resource(), {**local, **detect_slurm()})

    def test_the_resource_carries_nemo_lenss_keys_as_it_sends_them(self):
        # service.version; the W&B fields (set in code here, WANDB_PROJECT from the environment) under the consumer's
        # own keys; SLURM's counts as strings.
        with tempfile.TemporaryDirectory() as directory, environment(
                NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=directory,
                NEMO_LENS_HANG_SIGNAL="none", NEMO_LENS_METRICS_ENABLED="0", SLURM_JOB_ID="7", SLURM_NNODES="2",
                WANDB_ENTITY="", WANDB_PROJECT="from-env"):
            config = lens.NemoLensConfig.from_env()
            config.wandb_entity = "in-code"
            handle = lens.setup_telemetry(config, rank=0, world_size=1, _allow_reinit=True,
                                          resource_attributes={"wandb.project": "consumer"})
            with lens.helpers.span_cm("x"):
                pass
            handle.shutdown()
            resource = attributes(next(json_lines(directory, "traces"))["resourceSpans"][0]["resource"])
        self.assertEqual(resource["service.version"], lens.__version__)
        self.assertEqual((resource["wandb.entity"], resource["wandb.project"]), ("in-code", "consumer"))
        self.assertEqual((resource["slurm.job.id"], resource["slurm.nnodes"]), ("7", "2"))

    def test_encode_resource_attributes_for_a_child_process(self):
        from nemo.lens.resources import encode_resource_attributes
        value = encode_resource_attributes({"job.note": "exp/2026-01,seed=7", "worker.index": 3, "none": None,
                                            "bad,key": "x"}, inherited="team=a")
        self.assertEqual(value, "team=a,job.note=exp%2F2026-01%2Cseed%3D7,worker.index=3")
        child = subprocess.run([sys.executable, "-c", "import json, lens, support\n"
                                "import os\n"
                                "attributes = os.environ['CHILD_ATTRIBUTES']\n"
                                "with support.Run('all', OTEL_RESOURCE_ATTRIBUTES=attributes) as run:\n"
                                "    lens.span_cm('child').__enter__().end()\n"
                                "print(json.dumps(run.resources[0]))"],
                               env={**os.environ, "CHILD_ATTRIBUTES": value}, capture_output=True, text=True)
        resource = json.loads(child.stdout.splitlines()[-1])  # what the child's exporter wrote: decoded
        self.assertEqual((resource["job.note"], resource["worker.index"], resource["team"]),
                         ("exp/2026-01,seed=7", "3", "a"), child.stderr)

    def test_the_span_group_registry(self):
        from nemo.lens.groups import SpanRegistry
        SpanRegistry.clear()
        try:
            SpanRegistry.register("rl", {"rollout", "reward"},
                                  {"default": {"rollout"}, "rl_all": {"rollout", "reward"}})
            self.assertEqual(SpanRegistry.namespaces(), ["rl"])
            self.assertEqual(SpanRegistry.resolve("rl_all,typo"),
                             (frozenset({"rollout", "reward"}), frozenset({"typo"})))
            for bad in (("", {"x"}), ("rl2", {"all"}), ("rl2", {"x"}, {"p": {"unregistered"}}), ("rl", {"y"}),
                        ("rl3", {"rollout"})):
                with self.assertRaises(ValueError, msg=bad):
                    SpanRegistry.register(*bad)
            with Run("default") as run:  # setup resolves with SpanGroup's catalogue plus the registered groups
                self.assertEqual(lens.enabled_span_groups(), frozenset({"job", "checkpoint", "evaluate", "rollout"}))
                with lens.managed_span("rollout", "rl.rollout"):
                    pass
            self.assertEqual([s["name"] for s in run.spans], ["rl.rollout"])
            SpanRegistry.unregister("rl")
            with self.assertRaises(ValueError):
                SpanRegistry.unregister("rl")
        finally:
            SpanRegistry.clear()


if __name__ == "__main__":
    unittest.main()
