"""lens serves the OpenTelemetry Python API: code written against the real `opentelemetry-api` 1.45.2 (from
PyPI, in .venv) records through lens's pipeline once lens is set up — spans, back-dated spans, links, kinds, status
and exceptions, the current span across both APIs and both languages, metrics through `metrics.get_meter`, log
records through the logs API — and the OpenTelemetry SDK's own tracer nests under lens's current span. What lands
is read back from the file exporter's OTLP/JSON. Run by .venv's interpreter."""

import contextlib
import os
import subprocess
import tempfile
import threading
import sys
import textwrap
import time
import unittest
import unittest.mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

import lens  # noqa: E402
import lens_cpp_peer  # noqa: E402
from lens.helpers import managed_span  # noqa: E402
from lens.megatron import MegatronSpanGroup  # noqa: E402
from opentelemetry import _logs, context, metrics, trace  # noqa: E402
from opentelemetry.context import Context  # noqa: E402
from opentelemetry.trace import Link, SpanKind, Status, StatusCode  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402
from support import Run, attributes, environment  # noqa: E402

SECOND = 1_000_000_000


def by_name(run):
    return {span["name"]: span for span in run.spans}


class ProvidersTest(unittest.TestCase):
    def test_setup_makes_lens_the_global_tracer_meter_and_logger_provider(self):
        with Run("all"):
            self.assertIsInstance(trace.get_tracer(__name__), lens.tracer.Tracer)
            self.assertIsInstance(trace.get_tracer(__name__), trace.Tracer)
            self.assertIsInstance(metrics.get_meter(__name__), metrics.Meter)
            self.assertEqual(type(_logs.get_logger_provider()).__module__, "lens.otel")

    def test_a_tracer_taken_before_setup_records_after_it(self):
        early = trace.get_tracer("taken.early")  # OpenTelemetry's proxy until a provider is set
        with Run("all") as run:
            early.start_span("early.span").end()
        self.assertEqual([s["name"] for s in run.spans], ["early.span"])
        self.assertEqual(run.scopes[run.spans[0]["spanId"]], ("taken.early", None))

    def test_each_span_keeps_the_scope_of_the_tracer_that_made_it(self):
        """OTLP's InstrumentationScope is the tracer's name and version, on the C path and the general one; lens's own
        spans (managed_span, C++) keep `lens`."""
        with Run("all", group_cls=MegatronSpanGroup) as run:
            training = trace.get_tracer("megatron.training", "0.14.0")
            with training.start_as_current_span("megatron.train_step"):
                training.start_span("back.dated", start_time=time.time_ns()).end()  # the general form
                with trace.get_tracer("megatron.core.pipeline").start_as_current_span("p2p"):
                    with managed_span(MegatronSpanGroup.MICROBATCH, "lens.own"):
                        lens_cpp_peer.layer_span("cpp.layer", lambda: None)
        scopes = {s["name"]: run.scopes[s["spanId"]] for s in run.spans}
        self.assertEqual(scopes["lens.own"], scopes["cpp.layer"])
        self.assertEqual(scopes["lens.own"][0], "lens")
        self.assertEqual(scopes, {"megatron.train_step": ("megatron.training", "0.14.0"),
                                  "back.dated": ("megatron.training", "0.14.0"),
                                  "p2p": ("megatron.core.pipeline", None),
                                  "lens.own": scopes["lens.own"], "cpp.layer": scopes["lens.own"]})


class SpansTest(unittest.TestCase):
    def test_back_dated_spans_keep_the_times_they_were_given(self):
        launch = time.time_ns() - 3600 * SECOND  # an hour ago: no tick conversion may blur it
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
            startup = tracer.start_span("megatron.startup", context=Context(), start_time=launch)
            phase = tracer.start_span("launch_script", context=trace.set_span_in_context(startup),
                                      start_time=launch + 1)
            phase.end(end_time=launch + 2 * SECOND + 3)
            startup.end()
        spans = by_name(run)
        self.assertEqual(int(spans["megatron.startup"]["startTimeUnixNano"]), launch)
        self.assertEqual(int(spans["launch_script"]["startTimeUnixNano"]), launch + 1)
        self.assertEqual(int(spans["launch_script"]["endTimeUnixNano"]), launch + 2 * SECOND + 3)
        self.assertEqual(spans["launch_script"]["parentSpanId"], spans["megatron.startup"]["spanId"])
        self.assertNotIn("parentSpanId", spans["megatron.startup"])

    def test_an_empty_context_roots_a_new_trace_whatever_is_current(self):
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
            with tracer.start_as_current_span("ambient"):
                tracer.start_span("rooted", context=Context()).end()
                tracer.start_span("child").end()
        spans = by_name(run)
        self.assertNotIn("parentSpanId", spans["rooted"])
        self.assertNotEqual(spans["rooted"]["traceId"], spans["ambient"]["traceId"])
        self.assertEqual(spans["child"]["parentSpanId"], spans["ambient"]["spanId"])

    def test_links_kinds_attributes_status_and_names(self):
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
            first = tracer.start_span("interval.1", context=Context())
            first.end()
            second = tracer.start_span("interval.2", context=Context(), kind=SpanKind.CLIENT,
                                       attributes={"is_goodput_span": True},
                                       links=[Link(first.get_span_context(), {"link.kind": "previous"})])
            second.update_name("interval.2.renamed")
            second.set_status(Status(StatusCode.ERROR, "it broke"))
            second.end()
        spans = by_name(run)
        renamed = spans["interval.2.renamed"]
        self.assertEqual(renamed["kind"], 3)  # OTLP's SPAN_KIND_CLIENT
        self.assertEqual(attributes(renamed)["is_goodput_span"], True)
        self.assertEqual(renamed["status"], {"code": 2, "message": "it broke"})
        (link,) = renamed["links"]
        self.assertEqual((link["traceId"], link["spanId"]), (spans["interval.1"]["traceId"],
                                                             spans["interval.1"]["spanId"]))
        self.assertEqual(attributes(link), {"link.kind": "previous"})

    def test_an_exception_leaving_start_as_current_span_is_recorded(self):
        with Run("all") as run:
            with self.assertRaises(KeyError):
                with trace.get_tracer(__name__).start_as_current_span("failing"):
                    raise KeyError("missing")
        failing = run.span("failing")
        self.assertEqual(failing["status"]["code"], 2)
        self.assertEqual([e["name"] for e in failing["events"]], ["exception"])
        self.assertEqual(attributes(failing["events"][0])["exception.type"], "KeyError")

    def test_use_span_and_end_on_exit_false(self):
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
            span = tracer.start_span("used")
            with trace.use_span(span):
                tracer.start_span("under.used").end()
            with tracer.start_as_current_span("kept.open", end_on_exit=False) as kept:
                pass
            tracer.start_span("after").end()
            kept.end()
            span.end()
        spans = by_name(run)
        self.assertEqual(spans["under.used"]["parentSpanId"], spans["used"]["spanId"])
        self.assertNotIn("parentSpanId", spans["after"])
        self.assertIn("kept.open", spans)


class OneCurrentSpanTest(unittest.TestCase):
    """The current span is one for both APIs and both languages, in both directions."""

    def test_an_attached_otel_span_parents_managed_spans_and_cpp_spans(self):
        with Run("all", group_cls=MegatronSpanGroup) as run:
            tracer = trace.get_tracer(__name__)
            root = tracer.start_span("megatron.train", context=Context())
            token = context.attach(trace.set_span_in_context(root))
            self.assertEqual(trace.get_current_span().get_span_context().span_id, root.get_span_context().span_id)
            with managed_span(MegatronSpanGroup.STEP, "megatron.train_step"):
                lens_cpp_peer.layer_span("cpp.layer", lambda: None)
            context.detach(token)
            root.end()
            tracer.start_span("after.detach").end()
        spans = by_name(run)
        self.assertEqual(spans["megatron.train_step"]["parentSpanId"], spans["megatron.train"]["spanId"])
        self.assertEqual(spans["cpp.layer"]["parentSpanId"], spans["megatron.train_step"]["spanId"])
        self.assertNotIn("parentSpanId", spans["after.detach"])

    def test_a_misused_detach_changes_no_other_spans_parent(self):
        # A token detached on another thread or twice: OpenTelemetry logs "Failed to detach context" and lens's stack
        # keeps its entries. One detached out of order takes the contexts attached above it, as OpenTelemetry's own
        # context variable forgets them (under a lens span still open it takes nothing: span_unittest.cc).
        with Run("all", group_cls=MegatronSpanGroup) as run:
            tracer = trace.get_tracer(__name__)
            outer = tracer.start_span("outer", context=Context())
            outer_token = context.attach(trace.set_span_in_context(outer))
            inner = tracer.start_span("inner")
            inner_token = context.attach(trace.set_span_in_context(inner))
            with self.assertLogs("opentelemetry.context", "ERROR"):
                elsewhere = threading.Thread(target=context.detach, args=(inner_token,))
                elsewhere.start()
                elsewhere.join()
            with managed_span(MegatronSpanGroup.STEP, "under.inner"):
                pass
            context.detach(inner_token)
            with self.assertLogs("opentelemetry.context", "ERROR"):
                context.detach(inner_token)  # twice
            with managed_span(MegatronSpanGroup.STEP, "under.outer"):
                pass
            context.attach(trace.set_span_in_context(inner))
            context.detach(outer_token)  # out of order: inner's attach, above it, goes too
            with managed_span(MegatronSpanGroup.STEP, "after.both"):
                pass
            self.assertIs(trace.get_current_span(), trace.INVALID_SPAN)
            inner.end()
            outer.end()
        spans = by_name(run)
        self.assertEqual(spans["under.inner"]["parentSpanId"], spans["inner"]["spanId"])
        self.assertEqual(spans["under.outer"]["parentSpanId"], spans["outer"]["spanId"])
        self.assertNotIn("parentSpanId", spans["after.both"])

    def test_get_current_span_inside_a_managed_span_writes_to_it(self):
        with Run("all", group_cls=MegatronSpanGroup) as run:
            with managed_span(MegatronSpanGroup.STEP, "megatron.train_step") as step:
                current = trace.get_current_span()
                self.assertTrue(current.is_recording())
                self.assertEqual(current.get_span_context().span_id, step.get_span_context().span_id)
                current.set_attribute("nvrx.call_idx", 7)
                current.add_link(trace.INVALID_SPAN_CONTEXT)  # dropped, as in OpenTelemetry
                trace.get_tracer(__name__).start_span("otel.child").end()

                def inside_cpp():
                    trace.get_current_span().set_attribute("set.inside.cpp", True)
                    trace.get_tracer(__name__).start_span("otel.under.cpp").end()

                lens_cpp_peer.layer_span("cpp.layer", inside_cpp)
        spans = by_name(run)
        self.assertEqual(attributes(spans["megatron.train_step"])["nvrx.call_idx"], 7)
        self.assertEqual(spans["otel.child"]["parentSpanId"], spans["megatron.train_step"]["spanId"])
        self.assertEqual(attributes(spans["cpp.layer"])["set.inside.cpp"], True)
        self.assertEqual(spans["otel.under.cpp"]["parentSpanId"], spans["cpp.layer"]["spanId"])

    def test_outside_any_span_the_current_one_is_otels_invalid_span(self):
        with Run("all"):
            current = trace.get_current_span()
            self.assertIs(current, trace.INVALID_SPAN)
            current.set_attribute("ignored", 1)  # harmless, as in OpenTelemetry

    def test_the_sdks_own_tracer_and_propagator_see_lens_spans(self):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        with Run("all") as run:
            with managed_span(lens.SpanGroup.STEP, "lens.step") as step:
                with provider.get_tracer("sdk").start_as_current_span("sdk.child"):
                    carrier = {}
                    TraceContextTextMapPropagator().inject(carrier)
                    with managed_span(lens.SpanGroup.STEP, "lens.grandchild"):
                        pass
        (sdk_child,) = memory.get_finished_spans()
        self.assertEqual(sdk_child.parent.span_id, step.get_span_context().span_id)
        self.assertEqual(sdk_child.context.trace_id, step.get_span_context().trace_id)
        self.assertEqual(carrier["traceparent"].split("-")[2], f"{sdk_child.context.span_id:016x}")
        self.assertEqual(run.span("lens.grandchild")["parentSpanId"], f"{sdk_child.context.span_id:016x}")


class MetricsAndLogsTest(unittest.TestCase):
    def test_instruments_of_metrics_get_meter(self):
        with Run("all") as run:
            meter = metrics.get_meter("megatron.core.telemetry")
            meter.create_counter("t.counter").add(5, {"phase": "train"})
            meter.create_up_down_counter("t.updown").add(-2)
            meter.create_histogram("t.histogram", unit="ms").record(412.5)
            meter.create_gauge("t.gauge").set(3.25)
            meter.create_observable_gauge("t.observed", callbacks=[
                lambda options: [metrics.Observation(42.0, {"gpu": 0})]])
            lens.metrics.observe_now()
        self.assertEqual(run.metric("t.counter")["sum"]["dataPoints"][0]["asDouble"], 5)
        self.assertEqual(run.metric("t.histogram")["histogram"]["dataPoints"][0]["sum"], 412.5)
        self.assertEqual(run.metric("t.gauge")["gauge"]["dataPoints"][0]["asDouble"], 3.25)
        observed = run.metric("t.observed")["gauge"]["dataPoints"][0]
        self.assertEqual((observed["asDouble"], attributes(observed)), (42.0, {"gpu": 0}))

    def test_a_callback_that_raises_is_counted_and_the_others_still_run(self):
        def broken(options):
            raise RuntimeError("sensor gone")

        with Run("all") as run:
            before = lens.metrics.observable_callback_errors()
            metrics.get_meter("m").create_observable_gauge("t.broken", callbacks=[broken])
            metrics.get_meter("m").create_observable_counter("t.total", callbacks=[
                lambda options: [metrics.Observation(10)]])
            lens.metrics.observe_now()
            self.assertEqual(lens.metrics.observable_callback_errors(), before + 1)
        self.assertEqual(run.metric("t.total")["sum"]["dataPoints"][0]["asDouble"], 10)

    def test_log_records_of_the_logs_api_carry_the_current_span(self):
        with Run("all", NEMO_LENS_LOGS_ENABLED="1") as run:
            logger = _logs.get_logger("megatron")
            with managed_span(lens.SpanGroup.STEP, "logged.in") as span:
                logger.emit(severity_number=_logs.SeverityNumber.WARN, severity_text="WARN", body="slow step",
                            attributes={"step": 3})
        (record,) = [r for r in run.logs if r.get("body", {}).get("stringValue") == "slow step"]
        self.assertEqual(record["severityNumber"], 13)
        self.assertEqual(record["spanId"], span.get_span_context().span_id_hex)
        self.assertEqual(attributes(record)["step"], 3)


class SdkExportersTest(unittest.TestCase):
    """setup_telemetry(span_exporter=..., metric_reader=...) with the OpenTelemetry SDK's own objects, as NeMo Lens
    accepts them: fed from lens's pipeline on its background thread."""

    def exporter_class(self):
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        class Recording(SpanExporter):
            def __init__(self, fail_first=0, block_seconds=0.0):
                self.spans, self.threads, self.calls = [], set(), 0
                self.fail_first, self.block_seconds, self.shut = fail_first, block_seconds, False

            def export(self, spans):
                self.calls += 1
                self.threads.add(threading.get_ident())
                time.sleep(self.block_seconds)
                if self.calls <= self.fail_first:
                    raise ConnectionError("collector gone")
                self.spans.extend(spans)
                return SpanExportResult.SUCCESS

            def shutdown(self):
                self.shut = True

        return Recording

    def setup(self, stack, **kwargs):
        out = stack.enter_context(tempfile.TemporaryDirectory())
        stack.enter_context(environment(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_FILE_DIR=out,
                                        NEMO_LENS_EXPORTER="file",  # the signals without an SDK exporter
                                        NEMO_LENS_HANG_SIGNAL="none", OTEL_BSP_SCHEDULE_DELAY="20"))
        return lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1, _allow_reinit=True,
                                    **kwargs)

    def test_a_span_exporter_gets_readable_spans_off_the_training_thread(self):
        exporter = self.exporter_class()()
        with contextlib.ExitStack() as stack:
            handle = self.setup(stack, span_exporter=exporter)
            tracer = trace.get_tracer(__name__)
            with managed_span(lens.SpanGroup.STEP, "step", iteration=3) as step:
                span = tracer.start_span("child", links=[Link(step.get_span_context())])
                span.add_event("loaded", {"bytes": 7})
                span.set_status(Status(StatusCode.ERROR, "bad"))
                span.end()
            handle.shutdown()
        self.assertTrue(exporter.shut)
        self.assertNotIn(threading.get_ident(), exporter.threads)
        spans = {s.name: s for s in exporter.spans}
        self.assertEqual(set(spans), {"step", "child"})
        child, step = spans["child"], spans["step"]
        self.assertEqual(child.parent.span_id, step.context.span_id)
        self.assertEqual(child.links[0].context.span_id, step.context.span_id)
        self.assertEqual((child.events[0].name, dict(child.events[0].attributes)), ("loaded", {"bytes": 7}))
        self.assertEqual((child.status.status_code, child.status.description), (StatusCode.ERROR, "bad"))
        self.assertEqual(dict(step.attributes), {"iteration": 3})
        self.assertEqual(step.resource.attributes["service.name"], "nemo")

    def test_readable_spans_carry_what_the_sdk_s_own_tracer_gives_its_exporter(self):
        """The same calls through lens (into an SDK exporter given to setup) and through the SDK's own TracerProvider:
        every field an exporter reads is the same but the ids and times; a span still open at shutdown is marked.
        Both ways the bridge builds: setting ReadableSpan's and SpanContext's fields directly (this SDK's layout),
        and calling their constructors (an SDK whose layout it does not know)."""
        from lens import sdk_exporters
        for direct in (True, False):
            with self.subTest(direct=direct), contextlib.ExitStack() as stack:
                if not direct:
                    stack.enter_context(unittest.mock.patch.object(sdk_exporters, "_readable_span_fields",
                                                                   lambda parameters: None))
                    stack.enter_context(unittest.mock.patch.object(sdk_exporters, "_span_context_tuple_trace_state",
                                                                   lambda: None))
                self.check_readable_spans_against_the_sdk()

    def check_readable_spans_against_the_sdk(self):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        remote = TraceContextTextMapPropagator().extract(
            {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})

        def calls(tracer):
            with tracer.start_as_current_span("phase", kind=SpanKind.CLIENT, context=remote,
                                              attributes={"ints": [1, 2], "floats": [0.5], "flags": [True, False],
                                                          "names": ["a", "é"], "n": 7, "x": 1.5, "ok": True}) as span:
                span.add_event("loaded", {"bytes": 7, "what": "shard"})
                span.add_link(trace.get_current_span(remote).get_span_context(), {"why": "input"})
                span.set_status(Status(StatusCode.OK))
            failed = tracer.start_span("failed", kind=SpanKind.CONSUMER)
            failed.set_status(Status(StatusCode.ERROR, "bad input"))
            failed.end()

        def fields(span):
            return {"name": span.name, "kind": span.kind, "parent": (span.parent.span_id, span.parent.is_remote)
                    if span.parent else None, "trace_flags": int(span.context.trace_flags),
                    "attributes": dict(span.attributes),
                    "events": [(e.name, dict(e.attributes)) for e in span.events],
                    "links": [(link.context.trace_id, link.context.span_id, link.context.is_remote,
                               dict(link.attributes)) for link in span.links],
                    "status": (span.status.status_code, span.status.description),
                    "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version)}

        sdk_exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(sdk_exporter))
        calls(provider.get_tracer(__name__))
        exporter = self.exporter_class()()
        with contextlib.ExitStack() as stack:
            handle = self.setup(stack, span_exporter=exporter)
            calls(trace.get_tracer(__name__))
            open_at_shutdown = trace.get_tracer(__name__).start_span("still.open")
            handle.shutdown()
        lens_spans = {s.name: s for s in exporter.spans}
        for theirs in sdk_exporter.get_finished_spans():
            self.assertEqual(fields(lens_spans[theirs.name]), fields(theirs), theirs.name)
            self.assertGreater(lens_spans[theirs.name].end_time, lens_spans[theirs.name].start_time)
        truncated = lens_spans["still.open"]
        self.assertEqual(truncated.context.span_id, open_at_shutdown.get_span_context().span_id)
        self.assertIs(truncated.attributes["nemo.span.truncated"], True)
        self.assertEqual([(e.name, dict(e.attributes)) for e in truncated.events],
                         [("nemo.span.truncated", {"reason": "still open at telemetry shutdown"})])
        self.assertEqual(truncated.instrumentation_scope.name, __name__)

    def test_the_bridge_leaves_python_s_collector_as_it_found_it(self):
        """The bridge pauses the cyclic collector while it makes a batch's objects: on, or off as the application
        set it, it is as it was after every batch."""
        import gc
        for collecting in (True, False):
            exporter = self.exporter_class()()
            (gc.enable if collecting else gc.disable)()
            try:
                with contextlib.ExitStack() as stack:
                    handle = self.setup(stack, span_exporter=exporter)
                    for i in range(600):  # more than a batch
                        with managed_span(lens.SpanGroup.STEP, "step", i=i):
                            pass
                    handle.force_flush()
                    self.assertEqual(gc.isenabled(), collecting)
                    handle.shutdown()
                self.assertEqual(len(exporter.spans), 600)
                self.assertEqual(gc.isenabled(), collecting)
            finally:
                gc.enable()

    def test_an_exporter_that_raises_is_counted_and_the_next_batch_still_goes(self):
        exporter = self.exporter_class()(fail_first=1)
        with contextlib.ExitStack() as stack:
            handle = self.setup(stack, span_exporter=exporter)
            with managed_span(lens.SpanGroup.STEP, "lost"):
                pass
            handle.force_flush()
            with managed_span(lens.SpanGroup.STEP, "delivered"):
                pass
            handle.force_flush()
            stats = handle.span_stats()
            handle.shutdown()
        self.assertEqual(stats["dropped_export_failed"], 1)
        self.assertEqual([s.name for s in exporter.spans], ["delivered"])

    def test_an_exporter_that_blocks_never_blocks_the_training_thread(self):
        exporter = self.exporter_class()(block_seconds=2.0)
        with contextlib.ExitStack() as stack:
            handle = self.setup(stack, span_exporter=exporter)
            started = time.monotonic()
            for i in range(2000):
                with managed_span(lens.SpanGroup.STEP, "step", i=i):
                    pass
            spent = time.monotonic() - started
            stopped = time.monotonic()
            handle.shutdown(timeout_millis=500)
            self.assertLess(time.monotonic() - stopped, 1.9)  # shutdown gives up at its deadline
        self.assertLess(spent, 1.0)

    def test_a_metric_reader_collects_lens_s_metrics(self):
        from opentelemetry.sdk.metrics.export import (MetricExporter, MetricExportResult,
                                                      PeriodicExportingMetricReader)

        class Recording(MetricExporter):
            def __init__(self):
                super().__init__()
                self.names = set()

            def export(self, metrics_data, timeout_millis=10_000, **kwargs):
                for rm in metrics_data.resource_metrics:
                    for sm in rm.scope_metrics:
                        self.names.update(m.name for m in sm.metrics)
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis=10_000):
                return True

            def shutdown(self, timeout_millis=30_000, **kwargs):
                pass

        exporter = Recording()
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        with contextlib.ExitStack() as stack:
            handle = self.setup(stack, metric_reader=reader)
            metrics.get_meter("m").create_counter("sdk.fed.counter").add(2)
            handle.shutdown()  # lens's last metrics, then the reader's final collection and export
        self.assertIn("sdk.fed.counter", exporter.names)


class BadInputTest(unittest.TestCase):
    def test_wrong_types_are_clear_errors(self):
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
            with self.assertRaisesRegex(TypeError, "start_time"):
                tracer.start_span("s", start_time=1.5)
            with self.assertRaisesRegex(ValueError, "kind"):
                tracer.start_span("s", kind=9)
            with self.assertRaisesRegex(TypeError, "context"):
                tracer.start_span("s", context=42)
            with self.assertRaisesRegex(TypeError, "name"):
                tracer.start_span(None)
            span = tracer.start_span("ended.twice")
            span.end()
            span.end()
            with self.assertRaisesRegex(TypeError, "end_time"):
                tracer.start_span("bad.end").end(end_time="now")
        self.assertEqual([s["name"] for s in run.spans].count("ended.twice"), 1)

    def test_a_context_from_another_process_is_a_remote_parent(self):
        remote = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1))
        with Run("all") as run:
            trace.get_tracer(__name__).start_span(
                "from.remote", context=trace.set_span_in_context(trace.NonRecordingSpan(remote))).end()
        span = run.span("from.remote")
        self.assertEqual(span["parentSpanId"], "0000000000005678")
        self.assertEqual(span["traceId"], f"{0x1234:032x}")

    def test_a_tracer_used_after_shutdown_records_nothing_and_does_not_fail(self):
        with Run("all") as run:
            tracer = trace.get_tracer(__name__)
        span = tracer.start_span("after.shutdown")
        span.set_attribute("k", 1)
        span.end()
        with tracer.start_as_current_span("after.shutdown.current"):
            pass
        self.assertEqual(run.spans, [])

    def test_a_rank_that_exports_nothing_gets_non_recording_spans(self):
        with Run("all", rank=1, world_size=2, NEMO_LENS_RANK_STRATEGY="single_rank",
                 NEMO_LENS_EXPORT_RANK="0") as run:
            tracer = trace.get_tracer(__name__)
            with tracer.start_as_current_span("nothing") as span:
                self.assertFalse(span.is_recording())
                span.set_attribute("k", 1)
            self.assertFalse(tracer.start_span("nothing.either").is_recording())
        self.assertEqual(run.spans, [])


class WithoutOpenTelemetryTest(unittest.TestCase):
    def test_without_opentelemetry_api_lens_works_and_installs_nothing(self):
        script = textwrap.dedent("""
            import sys
            sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
            import os, tempfile
            os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_SPAN_GROUPS="all",
                              NEMO_LENS_FILE_DIR=tempfile.mkdtemp(), NEMO_LENS_HANG_SIGNAL="none")
            import lens
            handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=0, world_size=1)
            with handle.tracer.start_as_current_span("plain"):
                pass
            handle.shutdown()
            print("lens.otel" in sys.modules, handle.span_stats()["exported"])
        """)
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["False", "1"])


if __name__ == "__main__":
    unittest.main()
