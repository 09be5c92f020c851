"""Slows a process from outside, as a noisy neighbour or a throttled node would: stops it (SIGSTOP) for `share`
of each cycle and lets it run (SIGCONT) the rest, until stopped or the process ends. A cycle lasts `period` on
average, each one drawn between half and one and a half of it: a fixed period about as long as the process's step
kept the stops on one phase of the step for a whole window (its wait, where a stop costs nothing), and a rank paused
40 % of the time went unnamed in half of the windows of a CI run whose steps took 51 ms.

    with Pauser(pid, share=0.4, period=0.05):
        ...  # the process runs at about 60 % of its speed
"""

import os
import random
import signal
import threading
import time


class Pauser:
    def __init__(self, pid, share=0.4, period=0.05):
        if not 0 < share < 1 or period <= 0:
            raise ValueError(f"share must be in (0, 1) and period positive, not {share}, {period}")
        self.pid, self.share, self.period = pid, share, period
        self.cycles = 0
        self._cycle_lengths = random.Random(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pauser-{pid}", daemon=True)

    def _run(self):
        try:
            while not self._done.is_set():
                cycle = self.period * self._cycle_lengths.uniform(0.5, 1.5)
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(cycle * self.share)
                os.kill(self.pid, signal.SIGCONT)
                self.cycles += 1
                self._done.wait(cycle * (1 - self.share))
        except ProcessLookupError:  # the process ended
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)  # never leave it stopped
            except ProcessLookupError:
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
