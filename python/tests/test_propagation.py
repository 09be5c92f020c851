"""Context across processes and stages (W3C carriers, the 26-byte form, linked spans), the worker bootstrap, run
identity and the Megatron resource: the same results as from C++."""

import hashlib
import os
import subprocess
import sys
import unittest

import lens
from lens.helpers import managed_span
from lens.megatron import MegatronSpanGroup, build_telemetry_resource_attrs
from support import Run, attributes, environment


class CarrierTest(unittest.TestCase):
    def test_inject_extract_and_the_binary_form_round_trip(self):
        with Run("all") as run:
            with managed_span("step", "sender") as span:
                carrier = lens.inject({})
                context = span.get_span_context()
            self.assertEqual(carrier, {"traceparent": f"00-{context.trace_id_hex}-{context.span_id_hex}-03"})  # sampled, random
            remote = lens.extract({"Traceparent": carrier["traceparent"]})
            self.assertEqual(remote, context)
            self.assertTrue(remote.is_remote)
            payload = lens.to_bytes(context)
            self.assertEqual(len(payload), 26)
            self.assertEqual(lens.from_bytes(payload), context)
            self.assertIsNone(lens.from_bytes(b"\x00" * 26))
            self.assertIsNone(lens.from_bytes(b"short"))
            self.assertIsNone(lens.extract({"traceparent": "00-not-hex-01"}))
            self.assertIsNone(lens.extract({}))
            self.assertEqual(lens.inject({}), {})  # no span current: nothing to carry
            with lens.create_linked_span(run.handle.tracer, "megatron.pp.recv_forward.linked",
                                         remote_carrier=carrier, **{"dl.pipeline_parallel.rank": 1}):
                pass
            with lens.create_linked_span(None, "binary.linked", remote_context=lens.from_bytes(payload)):
                pass
        sender = run.span("sender")
        for name in ("megatron.pp.recv_forward.linked", "binary.linked"):
            linked = run.span(name)
            self.assertEqual(linked["links"][0]["spanId"], sender["spanId"])
            self.assertEqual(linked["links"][0]["traceId"], sender["traceId"])
        self.assertEqual(attributes(run.span("megatron.pp.recv_forward.linked")), {"dl.pipeline_parallel.rank": 1})

    def test_propagators_none_carries_nothing(self):
        with Run("all", OTEL_PROPAGATORS="none"):
            with managed_span("step", "quiet"):
                self.assertEqual(lens.inject({}), {})

    def test_a_context_from_python_ints(self):
        context = lens.SpanContext(trace_id=0x0af7651916cd43dd8448eb211c80319c, span_id=0xb7ad6b7169203331)
        self.assertEqual(lens._native.to_traceparent(context),
                         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


class IdentityTest(unittest.TestCase):
    def test_step_trace_id_is_the_first_16_bytes_of_sha256(self):
        expected = hashlib.sha256(b"lens.step/run-7/42").digest()[:16]
        self.assertEqual(lens.step_trace_id("run-7", 42), int.from_bytes(expected, "big"))

    def test_a_step_span_in_a_derived_trace(self):
        trace_id = lens.step_trace_id("run-7", 3)
        with Run("all") as run:
            with lens._native.start_span("megatron.train_step", group="step", trace_id=trace_id):
                pass
        self.assertEqual(int(run.span("megatron.train_step")["traceId"], 16), trace_id)

    def test_run_uuids_and_run_id_follow_the_environment(self):
        with environment(SLURM_JOB_ID="1234", SLURM_CLUSTER_NAME="c", NEMO_LENS_ENABLED="1"):
            self.assertEqual(lens.resolve_run_id(lens.NemoLensConfig.from_env()), "1234")
            uuids = lens.run_uuids()
            self.assertEqual(len(uuids["job_uuid"]), 36)
            self.assertEqual(uuids["job_uuid"], lens.run_uuids()["job_uuid"])

    def test_the_megatron_resource_has_the_training_attributes(self):
        class Args:
            local_rank, tensor_model_parallel_size, pipeline_model_parallel_size = 0, 1, 2
            data_parallel_size, global_batch_size, seq_length, num_layers = 2, 16, 64, 4
            hidden_size, num_attention_heads, train_iters, micro_batch_size = 64, 4, 100, 2
            ckpt_format, fp16, bf16 = "torch", False, True

        attrs = build_telemetry_resource_attrs(Args())
        self.assertEqual(attrs["dl.pipeline_parallel.size"], 2)
        self.assertEqual(attrs["megatron.precision"], "bf16")
        self.assertEqual(attrs["megatron.num_layers"], 4)
        self.assertEqual(build_telemetry_resource_attrs(vars(Args).copy() | {"bf16": False})["megatron.precision"],
                         "fp32")


class WorkerTest(unittest.TestCase):
    def test_a_worker_process_reports_as_its_rank_and_links_to_the_asking_span(self):
        with Run("all", group_cls=MegatronSpanGroup, NEMO_LENS_RUN_ID="run-w") as run:
            with managed_span("checkpoint", "megatron.save_checkpoint") as save:
                bootstrap = lens.build_worker_bootstrap(run.handle, {"megatron.num_layers": 4})
            worker = (
                "import sys, lens\n"
                "from lens.helpers import managed_span\n"
                "config = lens.NemoLensConfig.from_env()\n"
                "handle = lens.setup_worker_telemetry(sys.stdin.read(), config)\n"
                "link = lens.extract({'traceparent': sys.argv[1]})\n"
                "with lens.create_linked_span(handle.tracer, 'nvrx.checkpoint.save.write', remote_context=link):\n"
                "    pass\n"
                "handle.shutdown()\n")
            parent = lens._native.to_traceparent(save.get_span_context())
            subprocess.run([sys.executable, "-c", worker, parent], input=bootstrap, text=True, check=True,
                           env=dict(os.environ), capture_output=True)
        write = run.span("nvrx.checkpoint.save.write")
        self.assertEqual(write["links"][0]["spanId"], run.span("megatron.save_checkpoint")["spanId"])
        self.assertTrue(all(r["nemo.run.id"] == "run-w" for r in run.resources))
        self.assertIn(4, [r.get("megatron.num_layers") for r in run.resources])


if __name__ == "__main__":
    unittest.main()
