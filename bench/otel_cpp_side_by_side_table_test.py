"""bench/otel_cpp_side_by_side_table.py reads Google Benchmark's JSON as the side-by-side benchmark writes it and says
which bars hold: each row at least 10x, nothing dropped, and lens's three bars against itself."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import otel_cpp_side_by_side_table as table  # noqa: E402

FLOORS = {"BM_Floor_TwoSpanClockReads": 19.0, "BM_Floor_TwoSteadyClockReads": 47.0, "BM_Floor_RelaxedAtomicLoad": 0.27}
LENS = {"CurrentSpan": 25.0, "FourAttributes": 31.0, "Child": 26.0, "NotCurrent": 24.0, "TwoProducers": 15.0,
        "SampledOut": 10.0, "AlwaysOff": 0.36, "Disabled": 0.36}


def run(name, real_time, **counters):
    return {"run_name": name, "aggregate_name": "median", "real_time": real_time, **counters}


def benchmarks(lens=None, otel_factor=20.0, lens_drop=0.0):
    lens = {**LENS, **(lens or {})}
    runs = [run(name, time) for name, time in FLOORS.items()]
    for row, time in lens.items():
        suffix = "/real_time/threads:2" if row == "TwoProducers" else ""
        recording = row not in ("SampledOut", "AlwaysOff", "Disabled")
        counters = {"drop_ratio": lens_drop, "process_cpu_ns": time * 2.5} if recording else {}
        other = {"drop_ratio": 0.0, "process_cpu_ns": time * 2.5 * otel_factor} if recording else {}
        runs.append(run(f"BM_{row}_Lens{suffix}", time, **counters))
        runs.append(run(f"BM_{row}_OtelCpp{suffix}", time * otel_factor, **other))
        runs.append({"run_name": f"BM_{row}_Lens{suffix}", "aggregate_name": "mean", "real_time": 1e9})
    return {"benchmarks": runs}


class TableTest(unittest.TestCase):
    def verdict(self, free, pinned=None):
        with tempfile.TemporaryDirectory() as directory:
            paths = []
            for name, data in (("free", free), ("pinned", pinned or free)):
                path = os.path.join(directory, f"{name}.json")
                with open(path, "w") as f:
                    json.dump(data, f)
                paths.append(path)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = table.main(*paths)
        return status, out.getvalue()

    def test_every_bar_holds(self):
        status, text = self.verdict(benchmarks())
        self.assertEqual(status, 0, text)
        self.assertNotIn("FAILS", text)
        self.assertIn("| a span not made current | 24 | 480 | 20.0x |", text)
        self.assertIn("floor, pinned: two span-clock reads 19 ns", text)

    def test_a_row_under_ten_times_fails(self):
        status, text = self.verdict(benchmarks(), benchmarks(otel_factor=9.0))
        self.assertEqual(status, 1)
        self.assertIn("FAILS: a current span, no attributes, pinned: 9.0x, under 10x", text)

    def test_a_drop_fails(self):
        status, text = self.verdict(benchmarks(lens_drop=0.01))
        self.assertEqual(status, 1)
        self.assertIn("dropped 1.00%", text)

    def test_lens_own_bars(self):
        status, text = self.verdict(benchmarks({"NotCurrent": 30.0, "AlwaysOff": 1.5, "Disabled": 0.6}, otel_factor=60))
        self.assertEqual(status, 1)
        self.assertIn("FAILS: free: a span not made current <= a current span (30 ns against 25 ns)", text)
        self.assertIn("FAILS: free: always_off <= 2 x a disabled group", text)
        self.assertIn("FAILS: free: a disabled group <= 2 x a relaxed atomic load", text)


if __name__ == "__main__":
    unittest.main()
