"""A Python stand-in workload: 4 samples every 10 ms through workloads/kace_progress.py."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "workloads"))
from kace_progress import Progress  # noqa: E402

progress = Progress()
next_t = time.monotonic()
while True:
    next_t += 0.01
    time.sleep(max(0.0, next_t - time.monotonic()))
    progress.step(4)
