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
            traceparent = f"00-{context.trace_id_hex}-{context.span_id_hex}-03"  # sampled, random
            self.assertEqual(carrier, {"traceparent": traceparent})
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
            # Megatron's shape: created, then ended with .end(), no `with`
            ended = lens.create_linked_span(run.handle.tracer, "ended.linked", remote_carrier=carrier)
            with managed_span("step", "inside"):  # not the linked span's child: it is not made current
                pass
            ended.end()
            ended.end()  # twice: harmless
        sender = run.span("sender")
        self.assertNotEqual(run.span("inside").get("parentSpanId"), run.span("ended.linked")["spanId"])
        for name in ("megatron.pp.recv_forward.linked", "binary.linked", "ended.linked"):
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


BROADCAST = """
import os, sys, torch.distributed as dist, lens
from lens.helpers import managed_span
from lens.distributed import broadcast_trace_context
rank = int(os.environ["RANK"])
print("before init:", broadcast_trace_context(rank))
dist.init_process_group("gloo", rank=rank, world_size=2)
os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_EXPORTER="console",
                  NEMO_LENS_METRICS_ENABLED="0", NEMO_LENS_HANG_SIGNAL="none", NEMO_LENS_RANK_STRATEGY="all_ranks")
handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank=rank, world_size=2)
with managed_span("job", "root") as span:
    carrier = broadcast_trace_context(rank)
    mine = lens._native.to_traceparent(span.get_span_context())
print("carrier:", carrier["traceparent"], "mine:", mine)
handle.shutdown()
dist.destroy_process_group()
"""


class BroadcastTest(unittest.TestCase):
    def test_rank_0s_context_reaches_every_rank(self):
        # nemo.lens.distributed.broadcast_trace_context, which Megatron-LM imports: a collective
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
        ranks = [subprocess.Popen([sys.executable, "-c", BROADCAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env={**env, "RANK": str(r)}) for r in range(2)]
        outputs = [r.communicate(timeout=120) for r in ranks]
        self.assertEqual([r.returncode for r in ranks], [0, 0], [o[1][-2000:] for o in outputs])
        lines = [next(line for line in out.splitlines() if line.startswith("carrier:")).split() for out, _ in outputs]
        self.assertTrue(all("before init: None" in out for out, _ in outputs))
        rank0_span = lines[0][3]
        self.assertEqual([line[1] for line in lines], [rank0_span, rank0_span])  # rank 0's span on both ranks
        self.assertNotEqual(lines[1][3], rank0_span)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
