"""Python threads, fork and the GIL: spans from many threads at once are whole and correctly parented; a forked
child (a data-loader worker) gets no half-working pipeline; lens's export thread never needs the GIL."""

import os
import sys
import threading
import time
import unittest

import lens
from lens.helpers import managed_span
from support import Run

STEP, JOB = lens.SpanGroup.STEP, lens.SpanGroup.JOB


class ThreadsTest(unittest.TestCase):
    def test_spans_from_many_threads_at_once(self):
        threads, per_thread = 8, 500
        start = threading.Barrier(threads)

        def work(index):
            start.wait()
            for i in range(per_thread):
                with managed_span(STEP, f"outer.{index}", thread=index, i=i):
                    with managed_span(JOB, f"inner.{index}"):
                        pass

        with Run("all") as run:
            workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            stats = run.handle.span_stats()
        self.assertEqual(stats["dropped"], 0)
        self.assertEqual(len(run.spans), threads * per_thread * 2)
        by_id = {s["spanId"]: s for s in run.spans}
        for span in run.spans:
            if span["name"].startswith("inner."):
                parent = by_id[span["parentSpanId"]]
                self.assertEqual(parent["name"], "outer." + span["name"].split(".")[1])

    def test_the_export_thread_never_takes_the_gil(self):
        # The main thread holds the GIL the whole time (no other Python thread exists to ask for it); spans ended
        # before still reach the file, so the export thread ran without it.
        with Run("all", OTEL_BSP_SCHEDULE_DELAY="20") as run:
            for _ in range(100):
                with managed_span(JOB, "before"):
                    pass
            interval = sys.getswitchinterval()
            sys.setswitchinterval(10.0)
            try:
                deadline = time.monotonic() + 2.0
                while run.handle.span_stats()["exported"] < 100 and time.monotonic() < deadline:
                    pass  # a pure-Python busy loop: the GIL is never released
                exported = run.handle.span_stats()["exported"]
            finally:
                sys.setswitchinterval(interval)
        self.assertEqual(exported, 100)


class ForkTest(unittest.TestCase):
    def test_a_forked_child_records_nothing_and_exits_promptly(self):
        with Run("all") as run:
            with managed_span(STEP, "parent.before"):
                pass
            read_end, write_end = os.pipe()
            child = os.fork()
            if child == 0:  # the child: spans and a flush must neither crash, hang nor reach the parent's file
                os.close(read_end)
                try:
                    with managed_span(STEP, "child.span") as span:
                        pass
                    flushed = run.handle.force_flush(1000)
                    os.write(write_end, f"{lens.is_span_group_enabled(STEP)} {span is None} {flushed}".encode())
                finally:
                    os._exit(0)
            os.close(write_end)
            _, status = os.waitpid(child, 0)
            report = os.read(read_end, 100).decode()
            os.close(read_end)
            with managed_span(STEP, "parent.after"):
                pass
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(report, "False True True")
        self.assertEqual(sorted(s["name"] for s in run.spans), ["parent.after", "parent.before"])


if __name__ == "__main__":
    unittest.main()
