"""kace progress protocol, version 1 (docs/progress-protocol.md), for Python workloads.

    from kace_progress import report
    report(samples_done_total)          # cumulative count, after each step

Writes "done <samples> <CLOCK_MONOTONIC ns>\\n" with one os.write to the
descriptor named by $KACE_PROGRESS_FD; does nothing when the variable is
absent (not run by kace). Time is time.monotonic_ns(), which is
CLOCK_MONOTONIC on Linux, the clock kace reads.
"""
import os
import time

_fd = None
_looked_up = False


def _progress_fd():
    global _fd, _looked_up
    if not _looked_up:
        _looked_up = True
        value = os.environ.get("KACE_PROGRESS_FD", "")
        _fd = int(value) if value.isdigit() else None
    return _fd


def report(samples_total):
    """Reports the total number of samples processed so far."""
    fd = _progress_fd()
    if fd is None:
        return
    line = "done %d %d\n" % (int(samples_total), time.monotonic_ns())
    try:
        os.write(fd, line.encode("ascii"))
    except OSError:
        pass  # kace has gone: it will end this process anyway


class Progress:
    """Counts samples: progress.step(batch) after each batch."""

    def __init__(self):
        self.done = 0
        report(0)

    def step(self, samples):
        self.done += samples
        report(self.done)
