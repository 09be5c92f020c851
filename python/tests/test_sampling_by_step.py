"""The source documents' production setting (issue 29): `per_step` with OTEL_TRACES_SAMPLER=parentbased_traceidratio
and OTEL_TRACES_SAMPLER_ARG=0.1 keeps about one step in ten, whole (the step and everything under it), the same
steps on every rank of a run, and the segment they belong to; before, the one decision was the segment root's, so
a run of one segment exported nothing 9 times in 10."""

import collections
import unittest

import lens
from lens.megatron import MegatronSpanGroup
from support import Run

STEPS = 400
RATIO_ENV = dict(OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG="0.1")


def train(run_id, rank, **env):
    """One rank's run: a segment root (job), STEPS steps each with a forward_backward and two micro-batches."""
    with Run("per_step,microbatch", group_cls=MegatronSpanGroup, rank=rank, world_size=2,
             NEMO_LENS_RANK_STRATEGY="all_ranks", NEMO_LENS_RUN_ID=run_id, **{**RATIO_ENV, **env}) as run:
        with lens.managed_span(MegatronSpanGroup.JOB, "megatron.train"):
            for iteration in range(STEPS):
                with lens.managed_span(MegatronSpanGroup.STEP, "megatron.train_step", iteration=iteration):
                    with lens.managed_span(MegatronSpanGroup.FORWARD_BACKWARD, "megatron.forward_backward"):
                        for _ in range(2):
                            with lens.managed_span(MegatronSpanGroup.MICROBATCH, "megatron.microbatch.forward"):
                                pass
    return run


def kept_steps(run):
    return sorted(dict(a for a in ((x["key"], x["value"]) for x in s.get("attributes", [])))["iteration"]["intValue"]
                  for s in run.named("megatron.train_step"))


class SamplingByStepTest(unittest.TestCase):
    def test_about_one_step_in_ten_whole_with_its_segment(self):
        run = train("by-step-run", rank=0)
        steps = run.named("megatron.train_step")
        self.assertTrue(0.05 * STEPS <= len(steps) <= 0.15 * STEPS, f"{len(steps)} of {STEPS} steps kept")
        (segment,) = run.named("megatron.train")
        ids = {s["spanId"]: s for s in run.spans}
        children = collections.Counter(s.get("parentSpanId") for s in run.spans)
        for step in steps:  # whole: its forward_backward and both micro-batches
            self.assertEqual(step["parentSpanId"], segment["spanId"])
            self.assertEqual(children[step["spanId"]], 1)
        for span in run.spans:  # nothing kept without its parent
            if span["name"] != "megatron.train":
                self.assertIn(span["parentSpanId"], ids, span["name"])
        self.assertEqual(len(run.named("megatron.microbatch.forward")), 2 * len(steps))

    def test_every_rank_keeps_the_same_steps_and_another_run_others(self):
        first, second = train("by-step-same", rank=0), train("by-step-same", rank=1)
        self.assertEqual(kept_steps(first), kept_steps(second))
        self.assertNotEqual(kept_steps(first), kept_steps(train("by-step-other", rank=0)))

    def test_a_sampling_strategy_keeps_the_configured_sampler_alone(self):
        run = train("by-step-strategy", rank=0, NEMO_LENS_SAMPLING_STRATEGY="rank_aware")
        # rank_aware wraps the SDK sampler; the segment root's decision is the only one, as OpenTelemetry's.
        self.assertIn(len(run.named("megatron.train_step")), (0, STEPS))


if __name__ == "__main__":
    unittest.main()
