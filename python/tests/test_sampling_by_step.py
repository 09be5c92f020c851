"""A trace-id ratio sampler decides as OpenTelemetry's does, and the source documents' production setting keeps that
share of steps (CONTRACT §4): `per_step` with OTEL_TRACES_SAMPLER=parentbased_traceidratio and
OTEL_TRACES_SAMPLER_ARG=0.1 and no TRACE_LAYOUT is the step layout, where each step span roots a trace of its own
(step_trace_id(run id, n), linked to its segment), so the SDK's rule keeps about one step in ten, whole, the same
steps on every rank. Every exported span's trace id is one that the OpenTelemetry Python SDK's TraceIdRatioBased
sampler keeps, in both layouts and for both ratio samplers."""

import collections
import json
import os
import subprocess
import unittest

import lens
from lens.megatron import MegatronSpanGroup
from support import Run, attributes

STEPS = 200
VENV_PYTHON = os.environ.get("LENS_VENV_PYTHON")  # a Python with opentelemetry-sdk (set by ctest)

SDK_DECISIONS = """
import json, sys
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
ratio, ids = json.load(sys.stdin)
sampler = TraceIdRatioBased(ratio)
print(json.dumps([sampler.should_sample(None, int(i, 16), "span").decision.is_sampled() for i in ids]))
"""


def sdk_keeps(ratio, trace_ids):
    """The OpenTelemetry Python SDK's TraceIdRatioBased decision for each hex trace id, in order."""
    result = subprocess.run([VENV_PYTHON, "-c", SDK_DECISIONS], input=json.dumps([ratio, list(trace_ids)]),
                            capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout)


def train(run_id, rank=0, ratio="0.1", sampler="parentbased_traceidratio", **env):
    """One rank's run: a segment root (job), STEPS steps each with a forward_backward and two micro-batches."""
    with Run("per_step,microbatch", group_cls=MegatronSpanGroup, rank=rank, world_size=2,
             NEMO_LENS_RANK_STRATEGY="all_ranks", NEMO_LENS_RUN_ID=run_id, OTEL_TRACES_SAMPLER=sampler,
             OTEL_TRACES_SAMPLER_ARG=ratio, **env) as run:
        with lens.managed_span(MegatronSpanGroup.JOB, "megatron.train"):
            for iteration in range(STEPS):
                with lens.managed_span(MegatronSpanGroup.STEP, "megatron.train_step", iteration=iteration):
                    with lens.managed_span(MegatronSpanGroup.FORWARD_BACKWARD, "megatron.forward_backward"):
                        for _ in range(2):
                            with lens.managed_span(MegatronSpanGroup.MICROBATCH, "megatron.microbatch.forward"):
                                pass
    return run


def kept_steps(run):
    return sorted(attributes(s)["iteration"] for s in run.named("megatron.train_step"))


def step_trace(run_id, n):
    return f"{lens.step_trace_id(run_id, n):032x}"


@unittest.skipUnless(VENV_PYTHON, "needs LENS_VENV_PYTHON, a Python with opentelemetry-sdk")
class SamplingByStepTest(unittest.TestCase):
    def test_the_steps_kept_are_those_the_sdk_keeps_whole_with_a_link_to_their_segment(self):
        run = train("by-step-run")
        expected = [n for n, kept in enumerate(sdk_keeps(0.1, [step_trace("by-step-run", n) for n in range(STEPS)]))
                    if kept]
        self.assertTrue(0.04 * STEPS <= len(expected) <= 0.16 * STEPS, expected)  # the SDK's share, for this run id
        self.assertEqual(kept_steps(run), expected)
        children = collections.Counter(s.get("parentSpanId") for s in run.spans)
        segments = run.named("megatron.train")
        for step in run.named("megatron.train_step"):
            n = attributes(step)["iteration"]
            self.assertEqual(step["traceId"], step_trace("by-step-run", n))
            root = f"{lens.step_root_span_id(int(step['traceId'], 16)):016x}"
            self.assertEqual(step.get("parentSpanId"), root, "under its step trace's root")
            self.assertEqual([s["traceId"] for s in run.spans if s["spanId"] == root and s["name"] == "lens.step"],
                             [step["traceId"]], "which this rank, the lowest exporting one, exports")
            (link,) = step["links"]
            if segments:  # the segment is sampled by its own id: exported or not, it is linked
                self.assertEqual(link["spanId"], segments[0]["spanId"])
            self.assertEqual(children[step["spanId"]], 1)  # whole: its forward_backward and both micro-batches
        self.assertEqual(len(run.named("megatron.microbatch.forward")), 2 * len(expected))

    def test_every_exported_trace_is_one_the_sdk_keeps_in_both_layouts_and_for_both_samplers(self):
        # per_step at ratio 0.5: every trace exported, in either layout, is one the SDK would keep.
        for sampler in ("traceidratio", "parentbased_traceidratio"):
            for layout in (None, "segment", "step"):
                with self.subTest(sampler=sampler, layout=layout):
                    run = train(f"rule-{sampler}-{layout}", ratio="0.5", sampler=sampler,
                                NEMO_LENS_TRACE_LAYOUT=layout)
                    traces = sorted({s["traceId"] for s in run.spans})
                    self.assertTrue(all(sdk_keeps(0.5, traces)), traces)
                    if layout == "segment":  # one trace: the segment root's decision is the only one
                        self.assertIn(len(run.named("megatron.train_step")), (0, STEPS))
                    else:
                        self.assertTrue(0 < len(run.named("megatron.train_step")) < STEPS)

    def test_every_rank_keeps_the_same_steps_and_another_run_others(self):
        first, second = train("by-step-same", rank=0), train("by-step-same", rank=1)
        self.assertEqual(kept_steps(first), kept_steps(second))
        self.assertNotEqual(kept_steps(first), kept_steps(train("by-step-other")))

    def test_a_sampling_strategy_wraps_the_same_rule(self):
        # rank_aware at rate 1 lets every rank through to the ratio sampler, which decides each step trace.
        plain = train("by-step-strategy")
        gated = train("by-step-strategy", NEMO_LENS_SAMPLING_STRATEGY="rank_aware")
        self.assertEqual(kept_steps(gated), kept_steps(plain))


if __name__ == "__main__":
    unittest.main()
