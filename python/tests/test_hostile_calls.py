"""No Python call aborts the process: every public call of the span API, given values of the wrong type
(None, numbers, strings, lists, objects, what extract() gives for a garbage header), returns or raises TypeError /
ValueError. Each call runs in a child interpreter, so an abort is a failed test that names the call, not a dead
test runner."""

import os
import subprocess
import sys
import textwrap
import unittest

SETUP = textwrap.dedent("""
    import os
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=os.environ["OUT"],
                      NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_HANG_SIGNAL="none")
    import lens
    from lens.helpers import managed_span, safe_set_span_attributes, span_cm
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1)
    tracer = handle.tracer
    GARBAGE = lens.extract({"traceparent": "garbage"})
    results = []
    def attempt(text, call):
        try:
            call()
            results.append((text, "ok"))
        except (TypeError, ValueError) as e:
            results.append((text, type(e).__name__))
""")

HOSTILE = ["None", "GARBAGE", "42", "'text'", "[None]", "object()", "{'a': object()}", "float('nan')", "b'bytes'"]

CALLS = [  # each with X replaced by a hostile value; `span` is an open span
    "span.add_link(X)",
    "span.add_link(X, attributes=X)",
    "span.add_event(X)",
    "span.add_event('e', attributes=X)",
    "span.set_attribute(X, X)",
    "span.set_attribute('k', X)",
    "span.set_attributes(X)",
    "span.set_status(X)",
    "span.record_exception(X)",
    "safe_set_span_attributes(span, X)",
    "tracer.start_span(X).end()",
    "tracer.start_span('s', context=X).end()",
    "tracer.start_span('s', links=[X]).end()",
    "tracer.start_span('s', attributes=X).end()",
    "tracer.start_span('s', trace_id=X).end()",
    "tracer.start_span('s', kind=X).end()",
    "tracer.start_span('s', start_time=X).end()",
    "tracer.start_span('s').end(end_time=X)",
    "tracer.start_span('s').update_name(X)",
    "tracer.start_as_current_span('s', links=X).__enter__()",
    "lens.strategies.register_export_strategy('hostile', X)",
    "lens.encode_resource_attributes(X)",
    "lens.SpanRegistry.register('hostile', X)",
    "lens.safe_set_span_attributes(span, X, redact_keys=X)",
    "lens.inject(X, X)",
    "lens.inject({}, X)",
    "lens.extract(X)",
]


def script():
    lines = [SETUP, "with managed_span(lens.SpanGroup.STEP, 'outer') as span:"]
    for call in CALLS:
        for value in HOSTILE:
            text = call.replace("X", value)
            lines.append(f"    attempt({text!r}, lambda: {text})")
    lines += ["handle.shutdown()", "print('\\n'.join(f'{t} -> {r}' for t, r in results))", "print('ALL DONE')"]
    return "\n".join(lines)


class HostileCallsTest(unittest.TestCase):
    def test_no_call_aborts_the_interpreter(self):
        with __import__("tempfile").TemporaryDirectory() as out:
            result = subprocess.run([sys.executable, "-c", script()], capture_output=True, text=True, timeout=120,
                                    env={**os.environ, "OUT": out})
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("ALL DONE", result.stdout)
        outcomes = result.stdout.splitlines()[:-1]
        self.assertEqual(len(outcomes), len(CALLS) * len(HOSTILE))
        # extract() of garbage gives None, and a link to it is refused as the wrong type, not ignored silently.
        self.assertIn("span.add_link(GARBAGE) -> TypeError", outcomes)


class HostileEnvironmentTest(unittest.TestCase):
    def test_the_ranks_of_the_resource_come_all_three_or_none(self):
        from lens.megatron import build_telemetry_resource_attrs
        ranks = {"tensor_model_parallel_rank": 1, "pipeline_model_parallel_rank": 2, "data_parallel_rank": 3}
        attributes = build_telemetry_resource_attrs({"local_rank": 0, **ranks})
        self.assertEqual([attributes[f"dl.{k}_parallel.rank"] for k in ("tensor", "pipeline", "data")], [1, 2, 3])
        self.assertNotIn("dl.tensor_parallel.rank", build_telemetry_resource_attrs({"local_rank": 0}))
        with self.assertRaisesRegex(ValueError, "give all three or none"):
            build_telemetry_resource_attrs({"local_rank": 0, "tensor_model_parallel_rank": 1})

    def test_a_gpu_index_past_int_is_a_warning_not_an_exception_out_of_setup(self):
        code = textwrap.dedent("""
            import lens
            from lens.megatron import build_telemetry_resource_attrs
            handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1)
            attributes = build_telemetry_resource_attrs({"local_rank": 0})
            handle.shutdown()
            print("dl.gpu.uuid" in attributes, "ALL DONE")
        """)
        with __import__("tempfile").TemporaryDirectory() as out:
            env = {**os.environ, "NEMO_LENS_ENABLED": "1", "NEMO_LENS_EXPORTER": "file", "NEMO_LENS_FILE_DIR": out,
                   "NEMO_LENS_HANG_SIGNAL": "none", "CUDA_VISIBLE_DEVICES": "2147483648"}
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertEqual(result.stdout.split()[-3:], ["False", "ALL", "DONE"])
        self.assertIn("CUDA_VISIBLE_DEVICES", result.stderr)


if __name__ == "__main__":
    unittest.main()
