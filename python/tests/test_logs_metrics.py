"""The logging bridge and the meter: every `logging` record with its level, logger, location, exception and the
current trace and span ids; instruments with OpenTelemetry Python's names; Megatron's training metrics."""

import logging
import unittest

from lens.helpers import managed_span
from lens.logging_bridge import LensLoggingHandler, setup_logging_bridge
from lens.megatron import record_training_metrics
from support import Run, attributes


def points(metric):
    kind = next(k for k in ("sum", "gauge", "histogram") if k in metric)
    return kind, metric[kind]["dataPoints"]


class LoggingBridgeTest(unittest.TestCase):
    def tearDown(self):
        for logger in (logging.getLogger(), logging.getLogger("trainer")):
            for handler in list(logger.handlers):
                if isinstance(handler, LensLoggingHandler):
                    logger.removeHandler(handler)

    def test_every_record_with_its_context(self):
        logger = logging.getLogger("trainer")
        logger.setLevel(logging.DEBUG)
        with Run("all", NEMO_LENS_LOGS_ENABLED="1") as run:
            handler = setup_logging_bridge("trainer", level=logging.DEBUG)
            self.assertIs(setup_logging_bridge("trainer", level=logging.DEBUG), handler)  # added once
            with managed_span("step", "logging.step") as span:
                logger.info("loss %.2f", 2.5, extra={"step": 3, "unprintable": object()})
                context = span.get_span_context()
            logger.debug("debug line")
            try:
                raise ValueError("bad batch")
            except ValueError:
                logger.exception("step failed")
            logger.critical("fatal")
        by_body = {r["body"]["stringValue"]: r for r in run.logs}
        info = by_body["loss 2.50"]
        self.assertEqual((info["severityNumber"], info["severityText"]), (9, "INFO"))
        self.assertEqual(info["traceId"], context.trace_id_hex)
        self.assertEqual(info["spanId"], context.span_id_hex)
        where = attributes(info)
        self.assertEqual(where["logger.name"], "trainer")
        self.assertTrue(where["code.file.path"].endswith("test_logs_metrics.py"))
        self.assertEqual(where["code.function.name"], "test_every_record_with_its_context")
        self.assertIsInstance(where["code.line.number"], int)
        self.assertEqual(where["step"], 3)  # an `extra` field
        self.assertNotIn("unprintable", where)  # not an attribute value: left out
        self.assertEqual(by_body["debug line"]["severityNumber"], 5)
        self.assertNotIn("traceId", by_body["debug line"])  # no span current
        failed = attributes(by_body["step failed"])
        self.assertEqual((by_body["step failed"]["severityNumber"], failed["exception.type"]), (17, "ValueError"))
        self.assertEqual(failed["exception.message"], "bad batch")
        self.assertIn("raise ValueError", failed["exception.stacktrace"])
        self.assertEqual((by_body["fatal"]["severityNumber"], by_body["fatal"]["severityText"]), (21, "FATAL"))

    def test_a_no_op_where_logs_are_off_or_the_rank_does_not_export(self):
        with Run("all"):  # LOGS_ENABLED unset
            self.assertIsNone(setup_logging_bridge())
        with Run("all", world_size=2, NEMO_LENS_LOGS_ENABLED="1", NEMO_LENS_RANK_STRATEGY="single_rank",
                 NEMO_LENS_EXPORT_RANK="1") as run:
            self.assertFalse(run.handle.is_exporting)
            self.assertIsNone(setup_logging_bridge())
        self.assertFalse(any(isinstance(h, LensLoggingHandler) for h in logging.getLogger().handlers))


class MeterTest(unittest.TestCase):
    def test_instruments_with_the_otel_python_names(self):
        with Run("all") as run:
            meter = run.handle.meter
            samples = meter.create_counter("test.samples", unit="{sample}", description="Samples seen.")
            samples.add(30)
            samples.add(2, {"phase": "eval"})
            samples.add(-5)  # a counter never goes down
            inflight = meter.create_up_down_counter("test.inflight")
            inflight.add(3)
            inflight.add(-1)
            step_ms = meter.create_histogram("test.step_ms", unit="ms", explicit_bucket_boundaries_advisory=[10, 100])
            step_ms.record(5)
            step_ms.record(50)
            meter.create_gauge("test.memory_gb").set(12.5)
            self.assertIs(type(meter.create_counter("test.samples")), type(samples))
            with self.assertRaises(ValueError):
                meter.create_histogram("test.samples")  # the name is a counter's
        kind, data = points(run.metric("test.samples"))
        self.assertEqual(kind, "sum")
        self.assertEqual(run.metric("test.samples")["unit"], "{sample}")
        self.assertEqual(sorted(p["asDouble"] for p in data), [2, 30])
        self.assertEqual(points(run.metric("test.inflight"))[1][0]["asDouble"], 2)
        histogram = points(run.metric("test.step_ms"))[1][0]
        self.assertEqual((int(histogram["count"]), histogram["explicitBounds"]), (2, [10, 100]))
        self.assertEqual(points(run.metric("test.memory_gb"))[1][0]["asDouble"], 12.5)

    def test_megatron_training_metrics(self):
        with Run("all") as run:
            record_training_metrics(run.handle.meter, loss=2.5, grad_norm=0.75, learning_rate=3e-4,
                                    skipped_iters=1, tokens_per_sec=None, step_duration_ms=410.0)
            with self.assertRaisesRegex(TypeError, "unknown keyword.*lr"):
                record_training_metrics(run.handle.meter, lr=1.0)
        self.assertEqual(points(run.metric("megatron.training.loss"))[1][0]["asDouble"], 2.5)
        self.assertEqual(int(points(run.metric("megatron.training.skipped_iters"))[1][0]["asInt"]), 1)
        self.assertEqual(points(run.metric("megatron.training.step_duration_ms"))[0], "histogram")
        self.assertFalse([m for m in run.metrics if m["name"] == "megatron.training.tokens_per_sec"
                          and points(m)[1]])


if __name__ == "__main__":
    unittest.main()
