"""The commands of README.md and docs/*.md run as written: a trainer command must not export to a collector that is
not there and write nothing, a `--fail-if bubble-excess>10` must be quoted (unquoted it makes a file named `10`),
README's loss figures must be the ones a run gives, and its Python trainer's report must show every rank's steps.

A shell block whose info string is `sh runnable` is run as written, whole, with `bash -e`, from the repository root,
on the build the tests use (./build): README.md's first, after the README's first command, ./scripts/demo.sh (the
others read its run), then docs/*.md by name. The README's second command, ./scripts/test.sh, is what runs this test.
What the README says of the demo's losses is checked against the demo's own output."""

import glob
import json
import os
import re
import subprocess
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BLOCK = re.compile(r"^```sh runnable\n(.*?)^```$", re.S | re.M)


def runnable_blocks(path):
    with open(path, encoding="utf-8") as f:
        return BLOCK.findall(f.read())


def run(command, timeout=900):
    return subprocess.run(["bash", "-e", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def number_after(pattern, text):
    found = re.findall(pattern, text)
    return float(found[-1]) if found else None


class DocsCommandsTest(unittest.TestCase):
    maxDiff = None

    def test_the_readme_and_the_docs_commands_run_as_written(self):
        demo = run("./scripts/demo.sh")
        self.assertEqual(demo.returncode, 0, demo.stdout[-3000:] + demo.stderr[-3000:])
        self.check_the_readmes_losses(demo.stdout)
        self.check_every_link_of_the_demo_is_a_bound_flow()
        documents = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        ran = 0
        for path in documents:
            for number, block in enumerate(runnable_blocks(path), 1):
                with self.subTest(document=os.path.relpath(path, ROOT), block=number):
                    result = run(block)
                    self.assertEqual(result.returncode, 0, f"{block}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
                    if path.endswith("README.md") and "examples/python/pretrain_gpt.py" in block:
                        self.check_the_python_trainers_report(result.stdout)
                    ran += 1
        self.assertGreaterEqual(ran, 4, "the runnable blocks were not found")
        self.assertFalse(os.path.exists(os.path.join(ROOT, "10")), "a `>` in a command made a file")

    def check_the_python_trainers_report(self, report):
        """The README's Python trainer command ends with a report of every rank's steps, a straggler verdict,
        goodput, and the last evaluation labelled with the last iteration."""
        self.assertIn("4 ranks seen of 4", report, report[-3000:])
        self.assertRegex(report, r"\nsteps: 20 iterations", report[-3000:])
        self.assertRegex(report, r"\nstragglers: (none|rank)", report[-3000:])  # a verdict, not "not scored"
        self.assertRegex(report, r"\ngoodput: \d", report[-3000:])
        evaluations = re.findall(r"evaluation after iteration (\d+):", report)
        self.assertTrue(evaluations, report[-3000:])
        self.assertEqual(evaluations[-1], "20", report[-3000:])

    def check_every_link_of_the_demo_is_a_bound_flow(self):
        """The demo's Chrome JSON through the DevTools trace engine: every link an arrow it binds, none backwards
        (a pairing by name alone binds none and draws most arrows backwards)."""
        check = subprocess.run(["node", os.path.join(ROOT, "tools", "lens", "check_chrome_trace.js"),
                                os.path.join(ROOT, "build", "demo", "trace.json.gz"),
                                os.path.join(ROOT, "tests", "peers")],
                               capture_output=True, text=True, timeout=300)
        summary = json.loads(check.stdout)
        self.assertEqual((check.returncode, summary["problems"]), (0, []))
        self.assertGreater(summary["flows"], 100)
        self.assertEqual((summary["devtools_bound_flows"], summary["backwards_flows"]), (summary["flows"], 0))

    def check_the_readmes_losses(self, output):
        """The README: 'training loss below T, validation loss below V after 100 iterations'."""
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        claim = re.search(r"training\s+loss\s+below\s+([\d.]+)\s+and\s+validation\s+loss\s+below\s+([\d.]+)\s+after"
                          r"\s+100\s+iterations", readme)
        self.assertIsNotNone(claim, "the README no longer states the demo's losses as this test reads them")
        training = number_after(r"iteration\s+100/\s*100 \|.*?lm loss: ([\d.E+-]+)", output)
        validation = number_after(r"validation loss at iteration 100: ([\d.E+-]+)", output)
        self.assertIsNotNone(training, output[-2000:])
        self.assertIsNotNone(validation, output[-2000:])
        self.assertLess(training, float(claim.group(1)))
        self.assertLess(validation, float(claim.group(2)))


if __name__ == "__main__":
    unittest.main()
