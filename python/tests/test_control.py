"""The live span-group switch from Python (lens/control.h): the two calls a training loop makes at each iteration
boundary, against the real control endpoint of a real setup."""

import glob
import json
import os
import signal
import threading
import time
import unittest
import urllib.request

import lens
import lens.state
from lens import _native
from support import Run


def ask(run_dir, query):
    """What `lens ctl` does: POST /span-groups with the token from the run's control.json."""
    with open(os.path.join(run_dir, "control.json"), encoding="utf-8") as f:
        endpoint = json.load(f)
    request = urllib.request.Request(f"http://127.0.0.1:{endpoint['port']}/span-groups?{query}", method="POST",
                                     headers={"Authorization": "Bearer " + endpoint["token"]})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.load(response)


class ControlTest(unittest.TestCase):
    def test_a_request_is_taken_agreed_applied_and_restored_after_its_iterations(self):
        with Run("default", NEMO_LENS_CONTROL="1", NEMO_LENS_RUN_ID="py-control"):
            run_dir = glob.glob(os.path.join(os.environ["NEMO_LENS_FILE_DIR"], "py-control"))[0]
            self.assertEqual(lens.take_span_group_request(), [0, 0, 0, 0])  # nothing asked
            self.assertIsNone(lens.at_iteration_boundary(1, [0, 0, 0, 0]))
            before = _native.enabled_span_groups()
            status, answer = ask(run_dir, "spec=per_step&for=2")
            self.assertEqual(status, 202)
            words = lens.take_span_group_request()  # what rank 0 all-reduces with MAX
            self.assertEqual(len(words), 4)
            self.assertTrue(all(w >= 0 for w in words) and words[0] > 0)
            change = lens.at_iteration_boundary(2, words)
            self.assertEqual(change["iteration"], 2)
            self.assertEqual(change["span_groups"], answer["span_groups"])
            self.assertEqual((change["for_iterations"], change["restored"]), (2, False))
            self.assertNotEqual(_native.enabled_span_groups(), before)
            self.assertIsNone(lens.at_iteration_boundary(3, words))  # the same request: applied once
            back = lens.at_iteration_boundary(4, [0, 0, 0, 0])
            self.assertTrue(back["restored"])
            self.assertEqual(_native.enabled_span_groups(), before)
            with self.assertRaises(ValueError):
                lens.at_iteration_boundary(5, [1, 2])
            # Past lens ctl's bound on --for (10^9): refused, never "for 9223372036854775807 iterations".
            self.assertIsNone(lens.at_iteration_boundary(10, [words[0] + 1, 1, 0, 2 ** 63 - 1]))
            self.assertEqual(_native.enabled_span_groups(), before)


def ask_for_snapshot(run_dir):
    """SIGUSR1 to this process (lens's handler wakes its own thread; Python's handlers are untouched), and the
    snapshot it writes."""
    os.kill(os.getpid(), signal.SIGUSR1)
    path = os.path.join(run_dir, "rank0.snapshot.json")
    deadline = time.time() + 10
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.01)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class HangSnapshotTest(unittest.TestCase):
    def test_sigusr1_writes_the_python_threads_open_spans_and_the_process_goes_on(self):
        with Run("all", NEMO_LENS_RUN_ID="py-hang"):
            run_dir = os.path.join(os.environ["NEMO_LENS_FILE_DIR"], "py-hang")
            self.assertIsNone(lens.at_iteration_boundary(12, [0, 0, 0, 0]))  # the heartbeat: iteration 12 starts
            with lens.span_cm("py.step", iteration=12):
                with lens.span_cm("py.inner"):
                    snapshot = ask_for_snapshot(run_dir)
        self.assertEqual((snapshot["reason"], snapshot["rank"], snapshot["last_iteration_completed"]),
                         ("signal", 0, 11))
        main = next(t for t in snapshot["threads"] if t["tid"] == threading.get_native_id())
        self.assertEqual([s["name"] for s in main["open_spans"]], ["py.step", "py.inner"])
        self.assertEqual(main["open_spans"][0]["attributes"], {"iteration": 12})
        self.assertEqual(main["open_spans"][1]["parent_span_id"], main["open_spans"][0]["span_id"])

    def test_under_default_groups_the_loop_is_a_position_and_managed_span_yields_none(self):
        # Production's groups export nothing of the loop, yet a snapshot says where it is.
        with Run("default", NEMO_LENS_RUN_ID="py-positions"):
            run_dir = os.path.join(os.environ["NEMO_LENS_FILE_DIR"], "py-positions")
            self.assertFalse(lens.is_span_group_enabled("step"))  # NeMo Lens's answer: the group is off
            with lens.managed_span("step", "py.step", iteration=3) as span:
                self.assertIsNone(span)  # as for a group that is off
                snapshot = ask_for_snapshot(run_dir)
        main = next(t for t in snapshot["threads"] if t["tid"] == threading.get_native_id())
        self.assertEqual([(s["name"], s["group"], s["position_only"]) for s in main["open_spans"]],
                         [("py.step", "step", True)])
        self.assertEqual(main["open_spans"][0]["attributes"], {"iteration": 3})

    def test_a_rank_that_exports_nothing_enables_nothing_and_still_knows_where_it_is(self):
        # As the source documents say: on a non-exporting rank is_span_group_enabled is False and
        # managed_span yields None (`if span:` attribute code does not run); a snapshot still has the position.
        with Run("all", NEMO_LENS_RUN_ID="py-quiet", NEMO_LENS_RANK_STRATEGY="single_rank", rank=0,
                 world_size=2) as run:
            run_dir = os.path.join(os.environ["NEMO_LENS_FILE_DIR"], "py-quiet")
            self.assertFalse(run.handle.is_exporting)
            self.assertFalse(lens.is_span_group_enabled("step"))
            self.assertEqual(lens.state.enabled_span_groups(), frozenset())
            with lens.managed_span("job", "py.job", phase="train") as span:
                self.assertIsNone(span)
                snapshot = ask_for_snapshot(run_dir)
        main = next(t for t in snapshot["threads"] if t["tid"] == threading.get_native_id())
        self.assertEqual([(s["name"], s["position_only"]) for s in main["open_spans"]], [("py.job", True)])
        self.assertEqual(run.spans, [])


if __name__ == "__main__":
    unittest.main()
