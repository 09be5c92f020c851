"""pretrain_gpt's traces in real Jaeger (v1.76.0's all-in-one program, built from pinned Go modules by
scripts/setup-deps.sh), read back through Jaeger's query API.

4 ranks (2 pipeline stages x 2 data-parallel replicas, launched as torchrun would), every span group, every rank
exporting OTLP/gRPC straight to Jaeger, once per trace layout. Jaeger holds every span the ranks counted as
exported; each span's parent is in its trace with the parent's name the tree of CONTRACT §6 gives; each linked
pipeline receive is linked to a send of the other stage; in the step layout each iteration is one trace that
spans all 4 ranks, with one root (`lens.step`) from which every span is reached, and every transfer and gradient
sync linked to its peer's span, which links back. In the segment layout the ranks run on the CUDA runtime's
simulator with device timing (docs/GPU.md): each `<name>.device` span arrives as its host span's child. The Jaeger
build from the Go module proxy carries a placeholder page instead of its UI (the UI's assets are built with npm and
are not in the module), so the check is through the API alone."""

import collections
import os
import re
import time
import unittest

import peers

TRAINER = os.environ.get("LENS_PRETRAIN_GPT", "")
FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2", "--global-batch-size", "8",
         "--train-iters", "4", "--log-interval", "1", "--otel-enabled", "--otel-span-groups", "all"]
ITERATIONS = 4
FAKE_CUDART = os.environ.get("LENS_FAKE_CUDART", "")
STATS = re.compile(r"spans: (\d+) produced, (\d+) exported, (\d+) dropped")

# The parents a span may have in the tree every layout keeps (CONTRACT §6).
PARENTS = {"megatron.forward_backward": {"megatron.train_step"},
           "megatron.microbatch.forward": {"megatron.forward_backward", "megatron.evaluate.step"},
           "megatron.microbatch.backward": {"megatron.forward_backward"},
           "megatron.optimizer_step": {"megatron.train_step"},
           "megatron.layer.forward": {"megatron.microbatch.forward"}}


# In the step layout each end of a transfer links to the span at its other end (CONTRACT §6).
PEER_SPANS = {"megatron.p2p.send_forward": "megatron.p2p.recv_forward",
              "megatron.p2p.recv_forward": "megatron.p2p.send_forward",
              "megatron.p2p.send_backward": "megatron.p2p.recv_backward",
              "megatron.p2p.recv_backward": "megatron.p2p.send_backward",
              "megatron.grad_sync.start": "megatron.grad_sync.start",
              "megatron.grad_sync.finish": "megatron.grad_sync.finish"}


def train(directory, world, env, flags=()):
    """pretrain_gpt on `world` ranks; returns each rank's (produced, exported, dropped) spans from its shutdown
    line."""
    stats = []
    for output in peers.run_ranks(TRAINER, [*FLAGS, *flags], world, env, directory):
        found = STATS.findall(output)
        if not found:
            raise AssertionError(f"no span counts in a rank's output: {output[-2000:]}")
        stats.append(tuple(map(int, found[-1])))
    return stats


def tag(tags, key):
    return next((t["value"] for t in tags if t["key"] == key), None)


@unittest.skipUnless(TRAINER and os.access(peers.JAEGER, os.X_OK), "set by ctest: LENS_PRETRAIN_GPT, LENS_PEERS_BIN")
class JaegerTest(peers.PeerTest):
    def traces_in_jaeger(self, jaeger, service, expected_spans):
        """Every trace of `service` in Jaeger, once it holds `expected_spans` spans (or after 30 s)."""
        deadline = time.monotonic() + 30
        while True:
            end = int(time.time() * 1e6) + 60_000_000
            data = jaeger.get(f"/api/traces?service={service}&limit=100000&start={end - 3_600_000_000}&end={end}")
            traces = data["data"] or []
            if sum(len(t["spans"]) for t in traces) >= expected_spans or time.monotonic() > deadline:
                return traces
            time.sleep(0.2)

    def check_layout(self, layout, device=False):
        jaeger = self.start(peers.Jaeger(self.dir))
        service = f"lens-{layout}"
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{jaeger.grpc_port}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": service,
               "MEGATRON_OTEL_TRACE_LAYOUT": layout, "MEGATRON_OTEL_RUN_ID": f"jaeger-{layout}"}
        flags = []
        if device:  # each layer's attention and MLP a 200 us kernel on the simulator
            env.update({"MEGATRON_OTEL_DEVICE_TIMING": "cuda", "LENS_CUDART_LIBRARY": FAKE_CUDART})
            flags = ["--testing-fake-cuda", FAKE_CUDART, "--testing-kernel-us", "200"]
        stats = train(self.dir, 4, env, flags)
        for produced, exported, dropped in stats:
            self.assertEqual((exported, dropped), (produced, 0), stats)
        exported = sum(s[1] for s in stats)
        traces = self.traces_in_jaeger(jaeger, service, exported)

        spans = {}  # span id -> (trace id, span, rank)
        for trace in traces:
            for span in trace["spans"]:
                rank = tag(trace["processes"][span["processID"]]["tags"], "dl.rank")
                spans[span["spanID"]] = (trace["traceID"], span, rank)
        self.assertEqual(len(spans), exported, "Jaeger holds every span the ranks exported, once")
        self.assertEqual({r for _, _, r in spans.values()}, {0, 1, 2, 3})

        for trace_id, span, rank in spans.values():
            parents = [r for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
            self.assertLessEqual(len(parents), 1, span)
            if parents:
                self.assertIn(parents[0]["spanID"], spans, f"the parent of {span['operationName']} is in Jaeger")
                parent_trace, parent, parent_rank = spans[parents[0]["spanID"]]
                self.assertEqual(parent_trace, trace_id, span["operationName"])
                if parent["operationName"] != "lens.step":  # a step's root is on the lowest exporting rank
                    self.assertEqual(parent_rank, rank, span["operationName"])
                if span["operationName"] in PARENTS:
                    self.assertIn(parent["operationName"], PARENTS[span["operationName"]], span["operationName"])
            elif span["operationName"] in PARENTS:
                self.fail(f"{span['operationName']} has no parent in Jaeger")

        linked = [s for _, s, _ in spans.values() if s["operationName"] == "megatron.pp.recv_forward.linked"]
        self.assertTrue(linked, "no linked pipeline receive")
        for span, rank in ((s, spans[s["spanID"]][2]) for s in linked):
            links = [r for r in span["references"] if r["refType"] == "FOLLOWS_FROM"]
            self.assertEqual(len(links), 1, span)
            _, sender, sender_rank = spans[links[0]["spanID"]]
            self.assertEqual(sender["operationName"], "megatron.p2p.send_forward")
            self.assertNotEqual(sender_rank, rank, "the sender is on the other stage")
        return traces, spans

    def test_segment_layout(self):
        traces, spans = self.check_layout("segment", device=bool(FAKE_CUDART))
        steps = [s for _, s, _ in spans.values() if s["operationName"] == "megatron.train_step"]
        self.assertEqual(len(steps), 4 * ITERATIONS)
        if FAKE_CUDART:
            self.check_device_spans(spans)

    def check_device_spans(self, spans):
        """Every device span is its host span's child (the name less `.device`), INTERNAL, on cuda:0; every layer
        span has one."""
        devices = [(s, rank) for _, s, rank in spans.values() if s["operationName"].endswith(".device")]
        self.assertTrue(devices, "no device span in Jaeger")
        for span, rank in devices:
            parents = [r for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
            self.assertEqual(len(parents), 1, span)
            _, host, host_rank = spans[parents[0]["spanID"]]
            self.assertEqual(host["operationName"] + ".device", span["operationName"])
            self.assertEqual(host_rank, rank)
            self.assertEqual(tag(span["tags"], "lens.device"), "cuda:0")
            self.assertEqual(tag(span["tags"], "span.kind"), "internal")
        for name in ("megatron.layer.self_attention", "megatron.layer.mlp"):
            hosts = sum(1 for _, s, _ in spans.values() if s["operationName"] == name)
            self.assertEqual(sum(1 for s, _ in devices if s["operationName"] == name + ".device"), hosts, name)

    def test_step_layout_one_connected_trace_per_iteration_across_every_rank(self):
        traces, spans = self.check_layout("step")
        by_iteration = collections.defaultdict(set)
        for trace_id, span, rank in spans.values():
            if span["operationName"] == "megatron.train_step":
                by_iteration[tag(span["tags"], "megatron.iteration")].add((trace_id, rank))
        self.assertEqual(sorted(by_iteration), list(range(1, ITERATIONS + 1)))
        for iteration, members in by_iteration.items():
            self.assertEqual(len({t for t, _ in members}), 1, f"iteration {iteration} is one trace")
            self.assertEqual({r for _, r in members}, {0, 1, 2, 3}, f"iteration {iteration} spans every rank")
            trace_id = next(iter(members))[0]
            trace = next(t for t in traces if t["traceID"] == trace_id)
            self.assertEqual(len(trace["processes"]), 4, "4 ranks in the trace")
            self.check_connected(trace, spans)
        transfers = [(s, r) for t, s, r in spans.values() if s["operationName"] in PEER_SPANS]
        self.assertEqual({s["operationName"] for s, _ in transfers}, set(PEER_SPANS))
        for span, rank in transfers:
            self.check_linked_to_its_peer(span, rank, spans)

    def check_connected(self, trace, spans):
        """One root, lens.step, on rank 0 (the lowest exporting rank); every span of the trace under it."""
        children = collections.defaultdict(list)
        roots = []
        for span in trace["spans"]:
            parents = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
            (children[parents[0]] if parents else roots).append(span["spanID"])
        self.assertEqual([spans[r][1]["operationName"] for r in roots], ["lens.step"], "one root per step")
        self.assertEqual(spans[roots[0]][2], 0, "the lowest exporting rank exports the root")
        reached, frontier = set(), list(roots)
        while frontier:
            reached.add(frontier[-1])
            frontier.extend(children[frontier.pop()])
        self.assertEqual(reached, {s["spanID"] for s in trace["spans"]}, "every span reachable from the root")

    def check_linked_to_its_peer(self, span, rank, spans):
        """A transfer links to the span at its other end, on another rank, in its trace; a grad sync to the other
        replica's."""
        name = span["operationName"]
        links = [r for r in span["references"] if r["refType"] == "FOLLOWS_FROM"]
        peers = [spans.get(r["spanID"]) for r in links if r["traceID"] == span["traceID"]]
        self.assertTrue(peers, f"{name} on rank {rank} links to no span of its step")
        for peer in peers:
            self.assertIsNotNone(peer, f"{name} on rank {rank} links to a span Jaeger does not hold")
            self.assertEqual(peer[1]["operationName"], PEER_SPANS[name], name)
            self.assertNotEqual(peer[2], rank, f"{name}'s peer is on another rank")
            self.assertIn(span["spanID"], {r["spanID"] for r in peer[1]["references"]}, "and it links back")


PYTHON_TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python",
                              "pretrain_gpt.py")
PYTHON_WITH_OTEL = os.environ.get("LENS_VENV_PYTHON", "")


@unittest.skipUnless(PYTHON_WITH_OTEL and os.access(peers.JAEGER, os.X_OK) and os.access(peers.OTELCOL, os.X_OK),
                     "set by ctest: LENS_VENV_PYTHON, LENS_PEERS_BIN")
class PythonTrainerThroughTheCollectorToJaegerTest(peers.PeerTest):
    """The Python reference trainer (Megatron's imports and OpenTelemetry API calls, on lens) on 4 ranks, exporting
    OTLP/gRPC to the real Collector, which writes what it got and forwards the traces to real Jaeger: every span
    each rank exported arrives in both, and Jaeger shows the tree, the segment links and the pipeline links."""

    def test_four_ranks_through_the_collector_to_jaeger(self):
        jaeger = self.start(peers.Jaeger(self.dir))
        collector = self.start(peers.Collector(self.dir, forward_traces_to=jaeger.grpc_port))
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "lens-python-trainer",
               "MEGATRON_OTEL_RUN_ID": "python-trainer-e2e", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        flags = FLAGS + ["--save-interval", "2", "--eval-interval", "4", "--eval-iters", "1"]
        outputs = peers.run_ranks(PYTHON_WITH_OTEL, [PYTHON_TRAINER, *flags], 4, env, self.dir)
        stats = [tuple(map(int, STATS.findall(output)[-1])) for output in outputs]
        for produced, exported, dropped in stats:
            self.assertEqual((exported, dropped), (produced, 0), stats)
        exported = sum(s[1] for s in stats)

        traces = JaegerTest.traces_in_jaeger(self, jaeger, "lens-python-trainer", exported)
        spans = {span["spanID"]: (trace["traceID"], span,
                                  tag(trace["processes"][span["processID"]]["tags"], "dl.rank"))
                 for trace in traces for span in trace["spans"]}
        self.assertEqual(len(spans), exported, "Jaeger holds every span the ranks exported, once")
        self.assertEqual({rank for _, _, rank in spans.values()}, {0, 1, 2, 3})
        self.assertEqual(collector.stop(), 0, collector.log())  # its file exporter writes all by its exit
        in_collector = sum(len(s["spans"]) for request in collector.read("traces") for r in request["resourceSpans"]
                           for s in r["scopeSpans"])
        self.assertEqual(in_collector, exported, "the Collector wrote every span too")

        def parent_name(span):
            refs = [r for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
            return spans[refs[0]["spanID"]][1]["operationName"] if refs else None

        def linked_names(span):
            return {spans[r["spanID"]][1]["operationName"] for r in span.get("references", [])
                    if r["refType"] == "FOLLOWS_FROM" and r["spanID"] in spans}

        by_name = collections.defaultdict(list)
        for _, span, _ in spans.values():
            by_name[span["operationName"]].append(span)
        for span in by_name["megatron.pretrain"]:
            self.assertIsNone(parent_name(span))
        segments = by_name["megatron.train"]
        self.assertEqual(len(segments), 4 * 2, "two segments (--save-interval 2) on each rank")
        for span in segments:  # the first a child of pretrain; the second a new trace linked to it and the first
            if parent_name(span) is None:
                self.assertEqual(linked_names(span), {"megatron.pretrain", "megatron.train"})
            else:
                self.assertEqual(parent_name(span), "megatron.pretrain")
        for span in by_name["megatron.train_step"]:
            self.assertEqual(parent_name(span), "megatron.train")
        for name, parents in PARENTS.items():
            for span in by_name[name]:
                self.assertIn(parent_name(span), parents, name)
        for span in by_name["megatron.evaluate"]:
            self.assertEqual(tag(span["tags"], "megatron.eval_iters"), 1)  # set through get_current_span()
        for span in by_name["megatron.save_checkpoint"]:
            self.assertEqual(tag(span["tags"], "nvrx.call_idx"), tag(span["tags"], "megatron.iteration"))
        linked = by_name["megatron.pp.recv_forward.linked"]
        self.assertTrue(linked)
        for span in linked:
            self.assertEqual(linked_names(span), {"megatron.p2p.send_forward"})


if __name__ == "__main__":
    unittest.main()
