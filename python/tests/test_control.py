"""The live span-group switch from Python (lens/control.h): the two calls a training loop makes at each iteration
boundary, against the real control endpoint of a real setup."""

import glob
import json
import os
import unittest
import urllib.request

import lens
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


if __name__ == "__main__":
    unittest.main()
