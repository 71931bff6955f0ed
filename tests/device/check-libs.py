#!/usr/bin/env python3
"""Checks, from LD_DEBUG=libs output (LD_DEBUG_OUTPUT=DIR/ld: one file per
process), where kace and the injection library loaded their shared libraries
from: each must come from an allowed folder (the bundle, the fake driver),
be one of the C library's own (from a system folder), or be the injection
library itself.

  check-libs.py --kace PATH_OF_KACE --allow DIR [--allow DIR...] LD_DEBUG_DIR

Checked processes: those that ran kace (every library, at start and dlopen'd)
and those that loaded libkace_cupti.so (the libraries loaded after the
program started, i.e. by the driver's dlopen of the injection library and
what it pulls in). Exit 1 on any library from elsewhere, or when no kace
process was seen (the check would prove nothing).
"""
import argparse
import os
import re
import sys

GLIBC = re.compile(r"^(libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|"
                   r"libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|ld-linux-x86-64\.so\.2|libnss_[a-z]+\.so\.2)$")
SYSTEM = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/")
LINE = re.compile(r"^\s*\d+:\s*(.*)$")


def parse(path):
    """[(program, [startup libs], [runtime libs])] for each exec in the file."""
    progs, pending, current = [], [], None
    last_try = None
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw)
            if not m:
                continue
            s = m.group(1)
            if s.startswith("find library="):
                if last_try:
                    pending.append(last_try)
                last_try = None
            elif s.startswith("trying file="):
                last_try = s[len("trying file="):].strip()
            elif s.startswith("calling init:"):
                lib = s[len("calling init:"):].strip()
                if last_try:
                    pending.append(last_try)
                    last_try = None
                pending.append(lib)
            elif s.startswith("initialize program:"):
                if last_try:
                    pending.append(last_try)
                    last_try = None
                current = [s[len("initialize program:"):].strip(), pending, []]
                progs.append(current)
                pending = []
            elif s.startswith("transferring control:"):
                if current is not None:
                    current[1] += pending
                pending = []  # what follows is loaded at run time (dlopen)
    if last_try:
        pending.append(last_try)
    # Whatever is pending belongs to the last program's run time, or to the
    # next exec's start (which then has its own "initialize program").
    if progs:
        progs[-1][2] += pending
    return progs


def allowed(lib, allow):
    real = os.path.realpath(lib)
    base = os.path.basename(lib)
    if base == "libkace_cupti.so":
        return True
    if GLIBC.match(base) and real.startswith(SYSTEM):
        return True
    return any(real.startswith(a + "/") for a in allow)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kace", required=True)
    ap.add_argument("--allow", action="append", default=[])
    ap.add_argument("dir")
    a = ap.parse_args()
    allow = [os.path.realpath(d) for d in a.allow]
    kace = os.path.realpath(a.kace)
    bad, n_kace, n_inject, n_libs = set(), 0, 0, 0
    for name in sorted(os.listdir(a.dir)):
        for prog, start, run in parse(os.path.join(a.dir, name)):
            prog_real = os.path.realpath(prog) if prog else ""
            if prog_real == kace:
                n_kace += 1
                libs = start + run
            elif any(os.path.basename(x) == "libkace_cupti.so" for x in run):
                n_inject += 1
                libs = run
            else:
                continue
            for lib in libs:
                n_libs += 1
                if not allowed(lib, allow):
                    bad.add("%s (in %s)" % (lib, os.path.basename(prog)))
    for b in sorted(bad):
        print("check-libs: loaded from outside the bundle, the C library and the driver: " + b)
    print("check-libs: %d kace processes, %d processes with the injection library, %d loads checked, %d outside"
          % (n_kace, n_inject, n_libs, len(bad)))
    if n_kace == 0:
        print("check-libs: no kace process in %s: nothing was checked" % a.dir)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
