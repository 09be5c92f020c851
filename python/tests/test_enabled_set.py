"""set_enabled_span_groups as NeMo Lens's: any names, before setup, on a rank that does not export, and a
library's own groups outside the live catalogue; the helpers of a group lens records nothing of go to
OpenTelemetry's global tracer provider (Megatron-LM's documented test pattern)."""

import json
import os
import subprocess
import textwrap
import unittest

import lens
from lens.helpers import is_span_group_enabled, managed_span, span_cm, trace_fn
from lens.state import enabled_span_groups
from support import Run, attributes

VENV_PYTHON = os.environ.get("LENS_VENV_PYTHON")  # a Python with opentelemetry-sdk (set by ctest)


def run_with_sdk(code):
    """Runs `code` after SDK_PRELUDE in a fresh interpreter with OpenTelemetry's SDK and lens importable (a global
    SDK TracerProvider with an InMemorySpanExporter set, as Megatron's contributor docs do); its last line as JSON."""
    program = textwrap.dedent(SDK_PRELUDE) + textwrap.dedent(code)
    result = subprocess.run([VENV_PYTHON, "-c", program], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"]})
    if result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


SDK_PRELUDE = """
    import json
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import lens
    from lens.helpers import is_span_group_enabled, managed_span, span_cm, trace_fn

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    def spans():
        by_id = {s.context.span_id: s.name for s in exporter.get_finished_spans()}
        return {s.name: {"parent": by_id.get(s.parent.span_id) if s.parent else None,
                         "attributes": dict(s.attributes), "status": [s.status.status_code.name,
                                                                      s.status.description],
                         "events": [e.name for e in s.events]} for s in exporter.get_finished_spans()}
"""


@unittest.skipUnless(VENV_PYTHON, "LENS_VENV_PYTHON names a Python with opentelemetry-sdk (set by ctest)")
class WithoutSetupTest(unittest.TestCase):
    def test_the_documented_test_pattern_captures_through_the_global_provider(self):
        got = run_with_sdk("""
            lens.set_enabled_span_groups(frozenset({"step", "forward_backward"}))

            @trace_fn("forward_backward", "new.fn")
            def new_function(x):
                return x + 1

            with span_cm("new.top", prompt="secret"):
                with managed_span("step", "new.step", n=1, tracer=None) as step:
                    result = new_function(1)
                with managed_span("optimizer", "new.off") as off:
                    pass
            print(json.dumps({"spans": spans(), "result": result, "off": off is None,
                              "step": type(step).__module__.split(".")[0]}))
        """)
        self.assertEqual(got["result"], 2)
        self.assertTrue(got["off"])
        self.assertEqual(got["step"], "opentelemetry")  # the SDK's span, as NeMo Lens's managed_span yields
        self.assertEqual(sorted(got["spans"]), ["new.fn", "new.step", "new.top"])
        self.assertEqual(got["spans"]["new.step"]["parent"], "new.top")
        self.assertEqual(got["spans"]["new.fn"]["parent"], "new.step")
        self.assertEqual(got["spans"]["new.step"]["attributes"], {"n": 1})
        self.assertEqual(got["spans"]["new.top"]["attributes"], {"prompt": "[REDACTED]"})

    def test_exceptions_are_recorded_and_go_on_as_nemo_lens_records_them(self):
        got = run_with_sdk("""
            lens.set_enabled_span_groups({"step", "my.library.group"})

            @trace_fn("step", "failing.fn")
            def failing():
                raise KeyError("k")

            raised = []
            for make in (lambda: managed_span("my.library.group", "failing.managed"), lambda: span_cm("failing.cm")):
                try:
                    with make():
                        raise ValueError("bad shape")
                except ValueError as error:
                    raised.append(str(error))
            try:
                failing()
            except KeyError as error:
                raised.append(repr(error))
            print(json.dumps({"spans": spans(), "raised": raised,
                              "enabled": sorted(lens.state.enabled_span_groups())}))
        """)
        self.assertEqual(got["raised"], ["bad shape", "bad shape", "KeyError('k')"])
        self.assertEqual(got["enabled"], ["my.library.group", "step"])
        spans = got["spans"]
        self.assertEqual(spans["failing.managed"]["status"], ["ERROR", "bad shape"])  # the message alone
        self.assertEqual(spans["failing.cm"]["status"], ["ERROR", "ValueError: bad shape"])  # the SDK's form
        self.assertEqual(spans["failing.fn"]["status"], ["ERROR", "KeyError: 'k'"])
        for name in spans:
            self.assertEqual(spans[name]["events"], ["exception"], name)

    def test_a_setup_replaces_the_set_and_lens_becomes_the_provider(self):
        got = run_with_sdk("""
            import os, tempfile
            lens.set_enabled_span_groups({"step"})
            before = is_span_group_enabled("step")
            os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="default", NEMO_LENS_EXPORTER="console",
                              NEMO_LENS_METRICS_ENABLED="0", NEMO_LENS_HANG_SIGNAL="none")
            handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=2)  # does not export
            after = is_span_group_enabled("step")
            lens.set_enabled_span_groups({"step"})
            with managed_span("step", "after.setup") as span:
                recording = span.is_recording()
            handle.shutdown()
            print(json.dumps({"before": before, "after": after, "recording": recording,
                              "spans": sorted(spans())}))
        """)
        self.assertEqual(got, {"before": True, "after": False, "recording": False, "spans": []})


class AfterSetupTest(unittest.TestCase):
    def test_a_group_outside_the_catalogue_is_recorded_on_an_exporting_rank(self):
        with Run("default") as run:  # the base catalogue: no trace_region in it
            self.assertEqual(lens.set_enabled_span_groups({"trace_region", "job"}), {"trace_region", "job"})
            self.assertTrue(is_span_group_enabled("trace_region"))
            self.assertEqual(enabled_span_groups(), {"trace_region", "job"})
            with managed_span("trace_region", "ckpt.region", phase="save") as span:
                self.assertTrue(span.is_recording())
            lens.set_enabled_span_groups({"trace_region"})  # alone: lens's own set is empty
            with managed_span("trace_region", "ckpt.region.alone"):
                with span_cm("cm.inside"):
                    pass
            self.assertEqual(trace_fn("trace_region", "traced.region")(lambda: 5)(), 5)
            with managed_span("job", "job.off") as off:
                self.assertIsNone(off)
        self.assertEqual(attributes(run.span("ckpt.region")), {"phase": "save"})
        self.assertEqual(run.span("cm.inside")["parentSpanId"], run.span("ckpt.region.alone")["spanId"])
        self.assertEqual(len(run.named("traced.region")), 1)
        self.assertEqual(run.named("job.off"), [])

    def test_a_rank_that_does_not_export_enables_what_it_is_told_and_records_nothing(self):
        with Run("all", NEMO_LENS_RANK_STRATEGY="single_rank", rank=0, world_size=2) as run:
            self.assertFalse(is_span_group_enabled("step"))
            self.assertEqual(lens.set_enabled_span_groups({"step"}), {"step"})
            self.assertTrue(is_span_group_enabled("step"))
            with managed_span("step", "quiet", a=1) as span:
                self.assertFalse(span.is_recording())
                span.set_attribute("b", 2)  # as on a non-recording span of NeMo Lens's: nothing happens
            self.assertEqual(trace_fn("step", "quiet.fn")(lambda: 3)(), 3)
        self.assertEqual(run.spans, [])

    def test_a_new_setup_starts_from_its_own_groups(self):
        lens.set_enabled_span_groups({"my.group"})
        with Run("default"):
            self.assertFalse(is_span_group_enabled("my.group"))
            self.assertEqual(enabled_span_groups(), {"job", "checkpoint", "evaluate"})

    def test_names_are_str_and_a_spec_names_the_live_catalogues_groups(self):
        with Run("default"):
            with self.assertRaisesRegex(TypeError, "named by str, not 42"):
                lens.set_enabled_span_groups({"job", 42})
            with self.assertRaisesRegex(ValueError, "unknown span group 'lyer'"):
                lens.set_enabled_span_groups("job,lyer")
            self.assertEqual(enabled_span_groups(), {"job", "checkpoint", "evaluate"})  # nothing applied


if __name__ == "__main__":
    unittest.main(verbosity=2)
