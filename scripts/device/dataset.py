#!/usr/bin/env python3
"""Turns a device campaign's store into a dataset folder for the repository
(data/h100): the CSV files `kace import` reads, the campaign's own records and
a generated README (GPU, driver, CUDA, dates, the exact commands, the noise
floor, and what the dataset still lacks against the H100 issue's goals).

  python3 scripts/device/dataset.py STORE DEST [--kace BIN]

STORE: the last campaign call's store.tar.gz (or a kace.db; the store is
cumulative, so the last one holds every call's runs). DEST is rebuilt: its
profiles/, colocations/, campaign/ and README.md are replaced. With --kace
(default build/kace when present) the folder is imported into a scratch store
to prove it reads back.
"""
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402  (scripts/device/store.py: the export)

# The H100 issue's goals for the dataset.
GOALS = {"profiles": 12, "pairs": 30, "pair_occur": 5, "triples": 10, "grids": 2, "repeated": 6, "reps": 3,
         "timeslice": 3}


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def members(row):
    return tuple(sorted(row[k] for k in row if k.startswith("workload") and row[k]))


def unpack(src, tmp):
    if src.endswith(".db"):
        return src, None, None
    with tarfile.open(src) as t:
        for m in t.getmembers():
            name = os.path.normpath(m.name)
            if name in ("kace.db", "plan.txt", "visits.tsv") and m.isfile():
                t.extract(m, tmp)
    db = os.path.join(tmp, "kace.db")
    if not os.path.exists(db):
        sys.exit("dataset.py: %s holds no kace.db" % src)
    plan, visits = os.path.join(tmp, "plan.txt"), os.path.join(tmp, "visits.tsv")
    return db, plan if os.path.exists(plan) else None, visits if os.path.exists(visits) else None


def gpu_memory_gb(visits):
    for v in visits:
        parts = [p.strip() for p in v[1].split(",")]
        if len(parts) >= 3 and parts[2].endswith("MiB"):
            try:
                return round(float(parts[2][:-3]) / 1024)
            except ValueError:
                pass
    return None


def main(argv):
    args = argv[1:]
    kace = "build/kace" if os.path.exists("build/kace") else None
    if "--kace" in args:
        i = args.index("--kace")
        kace = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    src, dest = args
    tmp = tempfile.mkdtemp(prefix="kace-dataset.")
    try:
        db_path, plan, visits_path = unpack(src, tmp)
        export = os.path.join(tmp, "export")
        store.export(store.connect(db_path), export)
        for sub in ("profiles", "colocations", "campaign"):
            shutil.rmtree(os.path.join(dest, sub), ignore_errors=True)
            os.makedirs(os.path.join(dest, sub))
        for f in sorted(os.listdir(export)):
            if not f.endswith(".csv"):
                continue
            sub = "profiles" if f in ("kernel.csv", "system.csv") else \
                "campaign" if f in ("runs.csv", "spread.csv") else "colocations"
            shutil.copy(os.path.join(export, f), os.path.join(dest, sub, f))
        visits = []
        if visits_path:
            shutil.copy(visits_path, os.path.join(dest, "campaign", "visits.tsv"))
            with open(visits_path) as f:
                visits = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        if plan:
            shutil.copy(plan, os.path.join(dest, "campaign", "plan.txt"))
        readme = write_readme(dest, visits)
        if kace:
            scratch = os.path.join(tmp, "check.db")
            r = subprocess.run([kace, "import", "--quiet", "--db", scratch, dest], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("dataset.py: %s does not import: %s" % (dest, r.stderr.strip()))
        print(readme)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def write_readme(dest, visits):
    col = os.path.join(dest, "colocations")
    system = read_csv(os.path.join(dest, "profiles", "system.csv"))
    kernel = read_csv(os.path.join(dest, "profiles", "kernel.csv"))
    pairs = read_csv(os.path.join(col, "pairs.csv"))
    triples = read_csv(os.path.join(col, "triples.csv"))
    splits = read_csv(os.path.join(col, "mps-splits.csv"))
    timeslice = read_csv(os.path.join(col, "timeslice-pairs.csv"))
    runs = read_csv(os.path.join(dest, "campaign", "runs.csv"))
    spread = read_csv(os.path.join(dest, "campaign", "spread.csv"))

    profiled = sorted(r["Type"] for r in system)
    occur = {w: 0 for w in profiled}
    for r in pairs:
        for w in set(members(r)):
            occur[w] = occur.get(w, 0) + 1
    grids = {}
    for r in splits:
        grids.setdefault(members(r), set()).add((r["w1mps_pct"], r["w2mps_pct"]))
    full_grids = [g for g, pts in grids.items() if len(pts) >= 5]
    # Repetitions per colocation: spread.csv lists each member measured ok >= 2 times.
    repeated = {}
    for r in spread:
        repeated[r["colocation"]] = max(repeated.get(r["colocation"], 0), int(r["repetitions"]))
    pair_keys = {members(r) for r in pairs}
    ts_with_mps = [r for r in timeslice if members(r) in pair_keys]
    cvs = sorted(float(r["cv"]) for r in spread if r["cv"] not in ("", None))
    dates = sorted(r["measured_at"] for r in runs if r["measured_at"])

    have = {
        "profiles": len(profiled),
        "pairs": len(pairs),
        "pair_occur": min(occur.values()) if occur else 0,
        "triples": len(triples),
        "grids": len(full_grids),
        "repeated": sum(1 for n in repeated.values() if n >= GOALS["reps"]),
        "timeslice": len(ts_with_mps),
    }
    label = {
        "profiles": "workloads profiled alone",
        "pairs": "pairs at 100/100 MPS",
        "pair_occur": "pairs of the least-measured workload",
        "triples": "triples at 100/100 MPS",
        "grids": "MPS split grids (>= 5 splits of one pair)",
        "repeated": "colocations measured >= 3 times",
        "timeslice": "time-sliced pairs beside their MPS pair",
    }
    gpus = sorted({v[1] for v in visits}) or ["(not recorded)"]
    mem = gpu_memory_gb(visits)
    gpu_name = gpus[0].split(",")[0].strip()
    out = []
    w = out.append
    w("# kace's own dataset: %s" % gpu_name)
    w("")
    w("Generated by `scripts/device/dataset.py` from the device campaign's store; do not edit by hand.")
    w("Measured by kace itself (kace profile, kace measure under its own MPS daemon); see docs/gpu.md.")
    w("")
    w("## Where and when")
    w("")
    w("| call (UTC start) | GPU, driver, memory | CUDA | torch | bundle |")
    w("|---|---|---|---|---|")
    for v in visits:
        w("| " + " | ".join((v + ["?"] * 5)[:5]) + " |")
    if not visits:
        w("| (not recorded) | | | | |")
    w("")
    if dates:
        w("Colocation runs measured from %s to %s (%d runs)." % (dates[0], dates[-1], len({r["run"] for r in runs})))
        w("")
    w("## What it holds, against the goals of the H100 issue")
    w("")
    w("| part | have | goal | |")
    w("|---|---|---|---|")
    for k in ("profiles", "pairs", "pair_occur", "triples", "grids", "repeated", "timeslice"):
        w("| %s | %d | %d | %s |" % (label[k], have[k], GOALS[k], "met" if have[k] >= GOALS[k] else "**missing**"))
    w("")
    w("Workloads: " + ", ".join("`%s`" % p for p in profiled) + ".")
    w("Kernel metrics for %d of them." % len(kernel))
    w("")
    w("## Noise floor")
    w("")
    if cvs:
        w("Run-to-run coefficient of variation of each member's throughput over the colocations measured more than")
        w("once (`campaign/spread.csv`, %d members): median %.2f%%, largest %.2f%%. Differences between policies"
          % (len(cvs), 100 * statistics.median(cvs), 100 * cvs[-1]))
        w("smaller than this are noise.")
    else:
        w("No colocation was measured twice yet: the noise floor is unknown.")
    w("")
    w("## Files")
    w("")
    w("- `profiles/kernel.csv`, `profiles/system.csv`: each workload alone (CUPTI kernel metrics, NVML system")
    w("  metrics, exclusive throughput and its spread).")
    w("- `colocations/pairs.csv`, `triples.csv` (100/100 MPS), `mps-splits.csv` (other MPS splits),")
    w("  `timeslice-pairs.csv` (no MPS): each member's throughput, the mean over its ok repetitions.")
    w("- `campaign/runs.csv` (every run and member, failed ones included), `spread.csv`, `plan.txt`,")
    w("  `visits.tsv`: the campaign's own records; `kace import` recognises and skips the CSVs.")
    w("")
    w("## The exact commands")
    w("")
    w("```")
    w("make device-bundle                                  # here: build-bundle/kace-bundle.tar.gz")
    w("bash scripts/device/first-light.sh OUT              # on the GPU server, once")
    w("bash scripts/device/campaign.sh OUT --minutes 7 [--store PREV/store.tar.gz]   # each call")
    w("python3 scripts/device/dataset.py OUT/store.tar.gz data/h100                  # here, this folder")
    w("kace demo --data data/h100%s%s" % (" --gpu '%s'" % gpu_name if visits else "", " --gpu-memory %d" % mem if mem else ""))
    w("```")
    text = "\n".join(out) + "\n"
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv))
