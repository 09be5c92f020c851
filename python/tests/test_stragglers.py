"""Stragglers from Python (lens/straggler.h): the phases a training loop times, its window's summary, and the
scoring of gathered summaries, bad ones included, against a real setup's metrics and logs. The Python trainer on 4
ranks is in test_pretrain_gpt.py."""

import collections.abc
import math
import socket
import time
import unittest

import lens
from support import Run, environment

WORDS = 20  # a summary's: 8 figures, the host name (11 words of 6 bytes), the tensor-parallel rank


def summary(words, stage, compute_ms, wait_ms, exports=0):
    """Another rank's summary: this run's tag and window, with chosen medians, on this rank's host."""
    return [words[0], words[1], stage, 5, compute_ms * 1_000_000, wait_ms * 1_000_000, exports, 0, *words[8:]]


def host_of(words):
    """The host name a summary carries."""
    data = b"".join(w.to_bytes(6, "little") for w in words[8:])
    return data.split(b"\0", 1)[0].decode()


class StragglerTest(unittest.TestCase):
    def test_phases_make_a_window_whose_summary_is_scored_and_recorded(self):
        with Run("default", NEMO_LENS_STRAGGLER_INTERVAL="5", NEMO_LENS_LOGS_ENABLED="1",
                 NEMO_LENS_RUN_ID="py-straggler") as run:
            for iteration in range(1, 6):
                with lens.step_phase("compute"):
                    time.sleep(0.002)
                with lens.step_phase("wait"):
                    time.sleep(0.02)  # this rank waits for rank 1 below
                lens.end_step(iteration)
                self.assertEqual(lens.straggler_summary_due(iteration), iteration == 5)
            mine = lens.take_straggler_summary(5, 0)
            self.assertEqual(len(mine), WORDS)
            self.assertEqual((mine[1], mine[2], mine[3], mine[6], mine[7]), (5, 0, 5, 1, 0))  # local rank 0
            self.assertEqual(host_of(mine), socket.gethostname())
            self.assertGreaterEqual(mine[4], 2_000_000)
            gathered = [mine, summary(mine, 0, 30, 0), summary(mine, 1, 3, 3), summary(mine, 1, 3, 3)]
            self.assertTrue(lens.score_stragglers(5, gathered))  # handed to the scoring thread
            found = lens.take_straggler_findings(wait_s=30)
            self.assertEqual(found["flagged"], [1])
            self.assertIsNone(lens.take_straggler_findings(), "taken once")
            for bad in (math.nan, -1, 1e9):  # a wait that is no number of seconds in [0, 3600]
                with self.assertRaisesRegex(ValueError, "wait_s must be in"):
                    lens.take_straggler_findings(wait_s=bad)
            self.assertIn("rank 1 (stage 0) is a straggler", found["text"])
            self.assertEqual([r["rank"] for r in found["ranks"]], [0, 1, 2, 3])
            self.assertEqual([r["tensor_rank"] for r in found["ranks"]], [0, 0, 0, 0])
            self.assertEqual([r["flagged_windows"] for r in found["ranks"]], [0, 1, 0, 0])  # the run's first window
            self.assertEqual({r["host"] for r in found["ranks"]}, {socket.gethostname()})  # each summary's host
        names = {m["name"] for m in run.metrics}
        self.assertTrue({"lens.straggler.score", "lens.straggler.flagged", "lens.straggler.flagged_windows",
                         "lens.step.compute", "lens.step.wait"} <= names, names)
        self.assertTrue(any("rank 1 (stage 0) is a straggler" in r["body"]["stringValue"] for r in run.logs))

    def test_a_wait_inside_a_compute_is_taken_out_and_the_tensor_rank_travels(self):
        # A tensor-parallel all-reduce inside a layer's forward: its wait is not the rank's compute.
        with Run("default", NEMO_LENS_STRAGGLER_INTERVAL="5", NEMO_LENS_RUN_ID="py-straggler-tp"):
            for iteration in range(1, 6):
                with lens.step_phase("compute"):
                    time.sleep(0.002)
                    with lens.step_phase("wait"):
                        time.sleep(0.04)
                lens.end_step(iteration)
            mine = lens.take_straggler_summary(5, 1, tensor_rank=1)
        self.assertEqual(len(mine), WORDS)
        self.assertEqual((mine[2], mine[-1]), (1, 1))  # stage, tensor-parallel rank
        self.assertGreaterEqual(mine[5], 40_000_000)  # the wait
        self.assertLess(mine[4], 20_000_000)  # the compute, without it

    def test_bad_summaries_are_refused_and_bad_phases_are_errors(self):
        with Run("default", NEMO_LENS_STRAGGLER_INTERVAL="5", NEMO_LENS_RUN_ID="py-straggler-bad"):
            lens.end_step(1)
            mine = lens.take_straggler_summary(5, 0)
            self.assertTrue(lens.score_stragglers(5, [mine, summary(mine, 0, math.nan, 1), [1, 2, 3],
                                                      summary(mine, 0, -2, 1), "seven", [0] * WORDS]))
            found = lens.take_straggler_findings(wait_s=30)
            self.assertEqual(found["refused"], [1, 2, 3, 4])
            self.assertEqual(found["missing"], [5])
            with self.assertRaisesRegex(ValueError, "compute or wait"):
                lens.step_phase("forward")

    def test_a_sequence_whose_len_lies_is_refused_never_read_past(self):
        class Lying(collections.abc.Sequence):  # len() says WORDS; iteration yields `yields` items
            def __init__(self, yields):
                self.yields = yields

            def __len__(self):
                return WORDS

            def __getitem__(self, i):
                if i >= self.yields:
                    raise IndexError(i)
                return 1

        with Run("default", NEMO_LENS_STRAGGLER_INTERVAL="5", NEMO_LENS_RUN_ID="py-straggler-lying"):
            lens.end_step(1)
            mine = lens.take_straggler_summary(5, 0)
            self.assertTrue(lens.score_stragglers(5, [mine, Lying(WORDS + 2), Lying(1000), Lying(3),
                                                      [2 ** 70] + [0] * (WORDS - 1)]))
            found = lens.take_straggler_findings(wait_s=30)
            self.assertEqual(found["refused"], [1, 2, 3, 4])

    def test_off_or_not_exporting_scores_nothing(self):
        with Run("default", NEMO_LENS_STRAGGLER_INTERVAL="0"):
            self.assertFalse(lens.straggler_summary_due(20))
            self.assertEqual(lens.take_straggler_summary(20, 0), [0] * WORDS)
            self.assertFalse(lens.score_stragglers(20, [[0] * WORDS]))
            self.assertIsNone(lens.take_straggler_findings(wait_s=1))
        with environment(NEMO_LENS_STRAGGLER_INTERVAL="2"):
            with self.assertRaisesRegex(ValueError, "NEMO_LENS_STRAGGLER_INTERVAL='2'"):
                lens.NemoLensConfig.from_env()


if __name__ == "__main__":
    unittest.main()
