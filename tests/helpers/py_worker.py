"""A Python stand-in workload: 400 samples/s, a record every 10 ms, through workloads/kace_progress.py.

Each record's count is 400 x the time elapsed when it is sent (not 4 x the records sent): on
a loaded machine the interpreter can be late by a large part of a second, and a count that
assumed every step on time then made up the backlog inside the measured window (578/s seen)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "workloads"))
from kace_progress import Progress  # noqa: E402

RATE = 400.0
progress = Progress()
t0 = time.monotonic()
sent = 0
next_t = t0
while True:
    next_t += 0.01
    time.sleep(max(0.0, next_t - time.monotonic()))
    due = int(RATE * (time.monotonic() - t0))  # Progress stamps right after
    progress.step(due - sent)
    sent = due
