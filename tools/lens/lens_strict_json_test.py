"""What lens writes from text that no strict JSON parser takes as it is still parses, in every file: a thread name
the kernel cut inside a character (a hang snapshot), and span names and attributes of invalid UTF-8 (the traces,
the snapshot). Read by the tool's own readers (lens report, lens hang), by Python's json after a strict UTF-8
decode, and by Node's JSON.parse after a fatal TextDecoder; the bad bytes come back as U+FFFD."""

import glob
import json
import os
import subprocess
import tempfile
import unittest

LENS = os.environ.get("LENS_TOOL", "lens")
PROBE = os.environ.get("LENS_SPAN_PROBE")
RUN_ID = "strict-json"
REPLACEMENT = "\ufffd"

# Every line of each .jsonl file, and each other file whole, through a decoder that throws on invalid UTF-8.
NODE_STRICT = r"""
const fs = require('fs');
const decoder = new TextDecoder('utf-8', {fatal: true});
let parsed = 0;
for (const file of process.argv.slice(1)) {
  const text = decoder.decode(fs.readFileSync(file));
  for (const part of file.endsWith('.jsonl') ? text.split('\n').filter((l) => l.length > 0) : [text]) {
    JSON.parse(part);
    parsed++;
  }
}
console.log(parsed);
"""


def strict_python(path):
    with open(path, encoding="utf-8", errors="strict") as f:
        text = f.read()
    return [json.loads(line) for line in text.splitlines() if line] if path.endswith(".jsonl") else [json.loads(text)]


@unittest.skipUnless(PROBE, "LENS_SPAN_PROBE names the span_probe program")
class StrictJsonTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = os.path.join(self.tmp.name, RUN_ID)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEGATRON_OTEL_", "NEMO_LENS_"))}
        env.update(MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_EXPORTER="file", MEGATRON_OTEL_FILE_DIR=self.tmp.name,
                   MEGATRON_OTEL_RUN_ID=RUN_ID, MEGATRON_OTEL_SPAN_GROUPS="all")
        probe = subprocess.run([PROBE, "invalid-text", os.path.join(self.run, "rank0.snapshot.json")], env=env,
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        self.files = sorted(glob.glob(os.path.join(self.run, "*.json*")))
        self.assertIn(os.path.join(self.run, "rank0.snapshot.json"), self.files)
        self.assertIn(os.path.join(self.run, "rank0.traces.jsonl"), self.files)

    def tearDown(self):
        self.tmp.cleanup()

    def test_python_json_reads_every_file_and_the_bad_bytes_are_replacement_characters(self):
        snapshot = strict_python(os.path.join(self.run, "rank0.snapshot.json"))[0]
        names = [t["name"] for t in snapshot["threads"]]
        self.assertIn("\u00e9" * 7 + REPLACEMENT, names)  # 15 bytes: seven characters and half of the eighth
        open_spans = [s["name"] for t in snapshot["threads"] for s in t["open_spans"]]
        self.assertIn(f"bad.{REPLACEMENT}{REPLACEMENT}.name{REPLACEMENT}{REPLACEMENT}", open_spans)
        spans = [s for line in strict_python(os.path.join(self.run, "rank0.traces.jsonl"))
                 for rs in line["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        bad = next(s for s in spans if s["name"].startswith("bad."))
        self.assertEqual(bad["attributes"][0]["key"], "cut" + REPLACEMENT)
        self.assertEqual(bad["attributes"][0]["value"]["stringValue"],
                         REPLACEMENT * 3 + " surrogate, " + REPLACEMENT * 2 + " overlong, \x1b[2J")
        for path in self.files:
            strict_python(path)

    def test_node_json_parse_reads_every_file(self):
        result = subprocess.run(["node", "-e", NODE_STRICT, *self.files], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertGreaterEqual(int(result.stdout), len(self.files))

    def test_the_tools_readers_read_them(self):
        report = subprocess.run([LENS, "report", self.run, "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertEqual(json.loads(report.stdout)["read"]["problems"], [])
        hang = subprocess.run([LENS, "hang", self.run, "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(hang.returncode, 0, hang.stderr)
        self.assertEqual(json.loads(hang.stdout)["groups"][0]["ranks"], [0])


if __name__ == "__main__":
    unittest.main()
