"""managed_span, trace_fn, span_cm, safe_set_span_attributes and the tracer: NeMo Lens's semantics, checked on
the spans lens actually exported."""

import functools
import inspect
import unittest

import lens
from lens.helpers import is_span_group_enabled, managed_span, safe_set_span_attributes, span_cm, trace_fn
from lens.megatron import MegatronSpanGroup
from support import Run, attributes

STEP = lens.SpanGroup.STEP
JOB = lens.SpanGroup.JOB


class ManagedSpanTest(unittest.TestCase):
    def test_yields_the_span_with_its_attributes_and_nests(self):
        with Run("all") as run:
            with managed_span(STEP, "outer", iteration=3, loss=2.5, phase="warmup", ok=True, ids=[1, 2]) as outer:
                self.assertIsInstance(outer, lens.Span)
                self.assertTrue(outer.is_recording())
                with managed_span(JOB, "inner"):
                    pass
        outer, inner = run.span("outer"), run.span("inner")
        self.assertEqual(inner["parentSpanId"], outer["spanId"])
        self.assertEqual(inner["traceId"], outer["traceId"])
        self.assertEqual(attributes(outer),
                         {"iteration": 3, "loss": 2.5, "phase": "warmup", "ok": True, "ids": ["1", "2"]})

    def test_more_attributes_than_a_span_keeps_inline_keep_every_value(self):
        given = {f"int{i}": i for i in range(6)}
        given.update(real=0.5, flag=False, label="t", floats=[1.5, 2.5], names=["a", "b"], flags=[True], token="s")
        with Run("all") as run:
            with managed_span(STEP, "many", **given):
                pass
        expected = dict(given, floats=[1.5, 2.5], flags=[True], token="[REDACTED]")
        self.assertEqual(attributes(run.span("many")), expected)

    def test_a_disabled_group_yields_none_and_the_body_runs(self):
        ran = []
        with Run("default") as run:
            self.assertFalse(is_span_group_enabled(STEP))
            self.assertTrue(is_span_group_enabled(JOB))
            with managed_span(STEP, "off", big=object()) as span:
                ran.append(span)
        self.assertEqual(ran, [None])
        self.assertEqual(run.named("off"), [])

    def test_nothing_is_enabled_without_setup_or_for_unknown_groups(self):
        with Run("all"):
            self.assertFalse(is_span_group_enabled("no_such_group"))
            self.assertFalse(is_span_group_enabled(42))
            self.assertFalse(is_span_group_enabled(["unhashable"]))
        self.assertFalse(is_span_group_enabled(STEP))  # shut down: every group off

    def test_an_exception_is_recorded_with_error_status_and_reraised(self):
        with Run("all") as run:
            with self.assertRaisesRegex(ValueError, "bad shape"):
                with managed_span(STEP, "failing"):
                    raise ValueError("bad shape")
            with self.assertRaises(ValueError):
                with span_cm("failing.ungated"):
                    raise ValueError("bad shape")
        # As NeMo Lens's: managed_span sets the message alone; span_cm (and trace_fn) what the SDK sets.
        self.assertEqual(run.span("failing.ungated")["status"], {"code": 2, "message": "ValueError: bad shape"})
        span = run.span("failing")
        self.assertEqual(span["status"], {"code": 2, "message": "bad shape"})
        event = span["events"][0]
        self.assertEqual(event["name"], "exception")
        self.assertEqual(attributes(event),
                         {"exception.type": "ValueError", "exception.message": "bad shape", "exception.escaped": True})

    def test_a_base_exception_ends_the_span_unrecorded(self):
        for kind in (KeyboardInterrupt, SystemExit, GeneratorExit):
            with self.subTest(kind=kind.__name__):
                with Run("all") as run:
                    with self.assertRaises(kind):
                        with managed_span(STEP, "interrupted"):
                            raise kind()
                span = run.span("interrupted")
                self.assertEqual(span["status"], {})
                self.assertNotIn("events", span)

    def test_unsupported_attribute_values_are_dropped(self):
        with Run("all") as run:
            with managed_span(STEP, "values", none=None, obj=object(), mixed=[1, "a"], big=2**70, ok=1,
                              tracer=object()):
                pass
        self.assertEqual(attributes(run.span("values")), {"ok": 1})

    def test_span_methods(self):
        with Run("all") as run:
            with managed_span(STEP, "methods") as span:
                span.set_attribute("a", 1)
                span.set_attributes({"b": "two", "c": None})
                span.add_event("checkpoint", {"path": "/tmp/x", "a": 1, "b": 2.5, "c": True, "d": "d", "e": [1]})
                span.add_link(lens.SpanContext(trace_id=7, span_id=9), {"why": "retry"})
                span.set_status(lens.StatusCode.OK)
                other = span.get_span_context()
                self.assertTrue(other.is_valid)
                self.assertEqual(lens.current_context(), other)
        span = run.span("methods")
        self.assertEqual(attributes(span), {"a": 1, "b": "two"})
        self.assertEqual(span["events"][0]["name"], "checkpoint")
        self.assertEqual(attributes(span["events"][0]),
                         {"path": "/tmp/x", "a": 1, "b": 2.5, "c": True, "d": "d", "e": ["1"]})
        self.assertEqual((int(span["links"][0]["spanId"], 16), attributes(span["links"][0])), (9, {"why": "retry"}))
        self.assertEqual(span["status"]["code"], 1)

    def test_set_status_rejects_what_is_not_a_status(self):
        with Run("all"):
            with managed_span(STEP, "x") as span:
                with self.assertRaises(ValueError):
                    span.set_status(7)


class TraceFnTest(unittest.TestCase):
    def test_keeps_name_docstring_signature_and_checks_the_group_at_call_time(self):
        @trace_fn(STEP, "megatron.train_step")
        def train_step(batch, scale=2):
            """One step."""
            return batch * scale

        self.assertEqual(train_step.__name__, "train_step")
        self.assertEqual(train_step.__doc__, "One step.")
        self.assertEqual(str(inspect.signature(train_step)), "(batch, scale=2)")
        with Run("default") as run:
            self.assertEqual(train_step(3), 6)          # off: no span
            lens.set_enabled_span_groups({JOB, STEP})  # switched on at run time
            self.assertEqual(train_step(4, scale=3), 12)
        self.assertEqual(len(run.named("megatron.train_step")), 1)

    def test_methods_bind_and_exceptions_are_recorded(self):
        class Model:
            @trace_fn(STEP, "forward")
            def forward(self, x):
                if x < 0:
                    raise RuntimeError("negative")
                return self, x

        model = Model()
        with Run("all") as run:
            self.assertEqual(model.forward(1), (model, 1))
            with self.assertRaisesRegex(RuntimeError, "negative"):
                model.forward(-1)
        failed = [s for s in run.named("forward") if s.get("status")]
        self.assertEqual(len(run.named("forward")), 2)
        self.assertEqual(failed[0]["status"]["message"], "RuntimeError: negative")

    def test_the_call_s_span_is_current_inside_it_and_a_position_is_no_parent(self):
        @trace_fn(STEP, "traced")
        def traced():
            with managed_span(JOB, "inside"):
                pass

        with Run("all") as run:
            with managed_span(JOB, "outer"):
                traced()
        self.assertEqual(run.span("traced")["parentSpanId"], run.span("outer")["spanId"])
        self.assertEqual(run.span("inside")["parentSpanId"], run.span("traced")["spanId"])
        with Run("job") as run:  # step off, kept as a position for hang snapshots: nothing exported, no parent
            with managed_span(JOB, "outer"):
                traced()
        self.assertEqual(run.named("traced"), [])
        self.assertEqual(run.span("inside")["parentSpanId"], run.span("outer")["spanId"])


class UngatedAndSafeTest(unittest.TestCase):
    def test_span_cm_records_whatever_groups_are_on(self):
        with Run("") as run:  # no group at all
            with span_cm("ungated", answer=42) as span:
                self.assertTrue(span.is_recording())
            with self.assertRaises(KeyError):
                with span_cm("unrecorded", record_exception=False):
                    raise KeyError("k")
        self.assertEqual(attributes(run.span("ungated")), {"answer": 42})
        self.assertEqual(run.span("unrecorded")["status"], {})

    def test_span_cm_records_where_job_is_off(self):
        # It names no group: recorded wherever the rank records any group's spans, not only where `job`, group 0,
        # is on.
        with Run("step") as run:
            with span_cm("ungated.without.job"):
                pass
        self.assertEqual([s["name"] for s in run.spans], ["ungated.without.job"])

    def test_span_cm_records_nothing_where_telemetry_is_off(self):
        with span_cm("nowhere") as span:
            self.assertFalse(span.is_recording())

    def test_safe_set_span_attributes_never_raises(self):
        class Exploding:
            def set_attributes(self, attributes):
                raise RuntimeError("boom")

        safe_set_span_attributes(None, {"a": 1})
        safe_set_span_attributes(Exploding(), {"a": 1})
        safe_set_span_attributes(Exploding(), "not a mapping")
        with Run("all") as run:
            with managed_span(STEP, "safe") as span:
                safe_set_span_attributes(span, {"kept": 1.5, "none": None, "obj": object(), 3: "bad key",
                                                "list": (1, 2), "mixed": [1, object()]})
        self.assertEqual(attributes(run.span("safe")), {"kept": 1.5, "list": ["1", "2"]})

    def test_tracer_spans_and_links(self):
        with Run("") as run:
            tracer = run.handle.tracer
            with tracer.start_as_current_span("parent", attributes={"k": "v"}) as parent:
                child = tracer.start_span("child")
                child.end()
                linked = tracer.start_span("linked", links=[parent.get_span_context()], context=None)
                linked.end()
        parent, child, linked = run.span("parent"), run.span("child"), run.span("linked")
        self.assertEqual(child["parentSpanId"], parent["spanId"])
        self.assertEqual(linked["links"][0]["spanId"], parent["spanId"])


class FallbacksTest(unittest.TestCase):
    def test_the_fallbacks_are_no_ops_with_the_same_names(self):
        from lens import fallbacks
        for name in ("managed_span", "trace_fn", "span_cm", "is_span_group_enabled", "safe_set_span_attributes"):
            self.assertTrue(callable(getattr(fallbacks, name)))
        with fallbacks.managed_span(STEP, "x", a=1) as span:
            self.assertIsNone(span)
        with self.assertRaises(ValueError):
            with fallbacks.span_cm("x"):
                raise ValueError()
        f = functools.partial(int)
        self.assertIs(fallbacks.trace_fn(STEP, "x")(f), f)
        self.assertFalse(fallbacks.is_span_group_enabled(MegatronSpanGroup.LAYER))


if __name__ == "__main__":
    unittest.main()
