"""scripts/soak_tests.sh as BUILDING.md runs it, on a ctest tree of three tiny tests: it counts each test's passes
over the runs, keeps a failed run's log, runs only the label asked (or labels, `a|b`), exits 1 when a test fell
short of N and 2, with a message, for input it cannot run."""

import os
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOAK = os.path.join(ROOT, "scripts", "soak_tests.sh")

# steady passes every run; flaky fails its first run only (a file marks that it ran); elsewhere, labelled y, fails.
TREE = """
add_test(steady "/bin/true")
set_tests_properties(steady PROPERTIES LABELS "x")
add_test(flaky "/bin/sh" "-c" "[ -e {marker} ] || {{ touch {marker}; exit 1; }}")
set_tests_properties(flaky PROPERTIES LABELS "x")
add_test(elsewhere "/bin/false")
set_tests_properties(elsewhere PROPERTIES LABELS "y")
"""


class SoakTestsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.build = os.path.join(self.tmp.name, "build")
        os.mkdir(self.build)
        with open(os.path.join(self.build, "CTestTestfile.cmake"), "w") as f:
            f.write(TREE.format(marker=os.path.join(self.tmp.name, "ran-once")))

    def tearDown(self):
        self.tmp.cleanup()

    def soak(self, *args, loops="1"):
        return subprocess.run([SOAK, *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SOAK_BUSY_LOOPS": loops})

    def test_each_tests_passes_are_counted_and_a_failed_runs_log_is_kept(self):
        result = self.soak("x", "2", self.build)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"run 1 of 2 FAILED \(log: .*/soak/x/run-1\.log\) in \d+ s \(1 busy loops")
        self.assertIn("run 2 of 2 passed", result.stdout)
        self.assertRegex(result.stdout, r"\nflaky +1 of 2 passed\n")
        self.assertRegex(result.stdout, r"\nsteady +2 of 2 passed\n")
        self.assertNotIn("elsewhere", result.stdout)  # label y is not run
        self.assertIn("soak_tests: x: 1 of 2 tests passed all 2 runs", result.stdout)
        logs = sorted(f for f in os.listdir(os.path.join(self.build, "soak", "x")) if f.endswith(".log"))
        self.assertEqual(logs, ["run-1.log"])

    def test_several_labels_run_together_and_every_pass_exits_0(self):
        open(os.path.join(self.tmp.name, "ran-once"), "w").close()  # flaky passes from its first run
        both = self.soak("x|y", "1", self.build, loops="0")
        self.assertEqual(both.returncode, 1, both.stdout + both.stderr)
        self.assertRegex(both.stdout, r"\nelsewhere +0 of 1 passed\n")
        self.assertIn("(0 busy loops beside it)", both.stdout)
        self.assertTrue(os.path.isdir(os.path.join(self.build, "soak", "x+y")))
        x = self.soak("x", "3", self.build)
        self.assertEqual(x.returncode, 0, x.stdout + x.stderr)
        self.assertIn("soak_tests: x: 2 of 2 tests passed all 3 runs", x.stdout)

    def test_input_it_cannot_run_is_named_with_exit_2(self):
        for args, message in [(["x", "0", self.build], "N must be a positive whole number, not '0'"),
                              (["x", "many", self.build], "not 'many'"),
                              (["z", "1", self.build], "no test of '" + self.build + "' is labelled 'z'"),
                              (["x", "1", self.tmp.name], "no ctest build in '" + self.tmp.name + "'"),
                              (["x"], "Runs the tests of one ctest label N times")]:
            with self.subTest(args=args):
                result = self.soak(*args)
                self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
                self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main()
