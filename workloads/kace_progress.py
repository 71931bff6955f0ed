"""kace progress protocol, version 1 (docs/progress-protocol.md), for Python workloads.

    from kace_progress import report
    report(samples_done_total)          # cumulative count, after each step

Writes "done <samples> <CLOCK_MONOTONIC ns>\\n" with one os.write to the
descriptor named by $KACE_PROGRESS_FD; does nothing when the variable is
absent (not run by kace). Time is time.monotonic_ns(), which is
CLOCK_MONOTONIC on Linux, the clock kace reads.

Control channel: when kace also passes $KACE_CONTROL_FD (a socket), the
first report says "hello 1" on it and every report reads kace's messages
before it stamps its record: "stop" ends the process (status 0) after the
record, "pause" waits there (answering "paused") until "run" ("running") or
"stop" ("stopping"). No handler is put in then: a message waits in the
socket until the next report, however late the program's own set-up, and
SIGTERM stays kace's fallback that ends the process at once.

Stopping at a step boundary without the channel: the first report catches SIGTERM
(where it is at its default in the process itself, which Python alone
cannot see once a CUDA injection library has put a C handler in; never
under libkace_cupti.so, which keeps its own); kace's SIGTERM then ends the
process with status 0 at the next report, that is after the step it is in,
whose GPU work the step synchronized. NVIDIA's MPS documentation warns
that a client ended with GPU work outstanding can leave the MPS server and
its other clients in an undefined state. A process forked after that (a
DataLoader worker) gets SIGTERM back at its default.
"""
import os
import select
import signal
import threading
import time

_fd = None
_looked_up = False
_stopping = False
_control = None  # $KACE_CONTROL_FD, or None
_control_buf = b""
_control_stop = False


def _on_term(signum, frame):
    global _stopping
    _stopping = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # kace's second SIGTERM ends a process that never reports again


_fork_mask = None  # the signal mask before os.fork() (SIGTERM is blocked across it)


def _before_fork():
    # A SIGTERM that reaches the child before _forked_child resets the handler stays
    # pending (the child then ends at once) instead of being caught by _on_term.
    global _fork_mask
    try:
        _fork_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        _fork_mask = None


def _restore_mask():
    if _fork_mask is not None:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, _fork_mask)
        except (ValueError, OSError):
            pass


def _forked_child():
    # A forked helper (a DataLoader worker) never reports: SIGTERM ends it at once, as
    # its parent's shutdown and kace's group SIGTERM expect.
    global _stopping
    _stopping = False
    try:
        if signal.getsignal(signal.SIGTERM) is _on_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass
    _restore_mask()


def _sigterm_at_default():
    """Whether SIGTERM is at its default for the process, not only in Python's view.
    A library loaded after the interpreter started (a CUDA injection library: Nsight
    Compute's, kace's) may have installed a C handler that signal.getsignal() does not
    see; sigaction() does. Any doubt answers no: SIGTERM then ends the process at once."""
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        old = ctypes.create_string_buffer(256)  # a struct sigaction; its handler comes first
        if libc.sigaction(signal.SIGTERM, None, old) != 0:
            return False
        return not ctypes.c_void_p.from_buffer(old).value  # SIG_DFL is 0
    except (ImportError, OSError, AttributeError, ValueError):
        return False


def _bound_torch_threads():
    """kace pins a pool member to its CPU share and says how many threads it has
    ($KACE_TORCH_THREADS); OpenMP and BLAS read their own variables, torch's pool
    is set here, at the first report, once the workload has imported torch."""
    import sys
    value = os.environ.get("KACE_TORCH_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is None or not value.isdigit() or int(value) < 1:
        return
    try:
        torch.set_num_threads(int(value))
    except (AttributeError, RuntimeError, ValueError):
        pass  # an old or partial torch: its own default stays


def _progress_fd():
    global _fd, _looked_up
    if not _looked_up:
        _looked_up = True
        _bound_torch_threads()
        value = os.environ.get("KACE_PROGRESS_FD", "")
        _fd = int(value) if value.isdigit() else None
        global _control
        control = os.environ.get("KACE_CONTROL_FD", "")
        if _fd is not None and control.isdigit():
            _control = int(control)
            _answer(b"hello 1\n")
            return _fd  # kace stops it by message: no SIGTERM handler
        # Under libkace_cupti.so SIGTERM stays the injection library's (kace profile's counters
        # run has no MPS). Under another injection library (Nsight Compute's) the handler goes in
        # where SIGTERM really is at its default: a run bounded by SIGTERM then ends at a step
        # boundary with status 0, and ncu keeps its report.
        inject = os.path.basename(os.environ.get("CUDA_INJECTION64_PATH", ""))
        if _fd is not None and threading.current_thread() is threading.main_thread() and \
                "kace_cupti" not in inject:
            try:
                if _sigterm_at_default():
                    signal.signal(signal.SIGTERM, _on_term)
                    if hasattr(os, "register_at_fork"):  # Python >= 3.7
                        os.register_at_fork(before=_before_fork, after_in_parent=_restore_mask,
                                            after_in_child=_forked_child)
            except (ValueError, OSError):
                pass  # no handler: SIGTERM ends the process at once, as before
    return _fd


def _answer(line):
    if _control is not None:
        try:
            os.write(_control, line)
        except OSError:
            pass  # kace has gone


def _read_control(blocking):
    """kace's latest message: "r" (run), "p" (pause), "s" (stop; also when kace closed the
    channel) or None. Blocking: waits for the next message. A stop once read stays."""
    global _control_buf, _control_stop
    last = "s" if _control_stop else None
    while _control is not None and not _control_stop:
        try:
            ready, _, _ = select.select([_control], [], [], None if blocking and last is None else 0)
        except InterruptedError:
            continue
        if not ready:
            break
        try:
            data = os.read(_control, 256)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            _control_stop = True
            return "s"
        _control_buf += data
        while b"\n" in _control_buf:
            line, _control_buf = _control_buf.split(b"\n", 1)
            if line == b"stop":
                _control_stop = True
                return "s"
            if line in (b"pause", b"run"):
                last = line[:1].decode()
        if blocking and last is not None:
            break
    return last


def report(samples_total):
    """Reports the total number of samples processed so far; after kace's
    SIGTERM, ends the process (status 0) once the record is written."""
    fd = _progress_fd()
    if fd is None:
        return
    # Read before the record is stamped: the record this call exits after is then stamped
    # after kace's SIGTERM, which is how kace tells a stop at a report from an exit
    # mid-step. A SIGTERM that arrives later is acted on at the next report.
    stopping = _stopping
    msg = _read_control(False)
    line = "done %d %d\n" % (int(samples_total), time.monotonic_ns())
    try:
        os.write(fd, line.encode("ascii"))
    except OSError:
        pass  # kace has gone: it will end this process anyway
    while msg == "p":  # paused at this step boundary until run or stop
        _answer(b"paused\n")
        msg = _read_control(True)
        if msg == "r":
            _answer(b"running\n")
    if msg == "s":
        _answer(b"stopping\n")
        raise SystemExit(0)
    if stopping:
        raise SystemExit(0)


class Progress:
    """Counts samples: progress.step(batch) after each batch."""

    def __init__(self):
        self.done = 0
        report(0)

    def step(self, samples):
        self.done += samples
        report(self.done)
