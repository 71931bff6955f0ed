#!/usr/bin/env python3
"""Turns a device campaign's store into a dataset folder for the repository
(data/h100): the CSV files `kace import` reads, the campaign's own records and
a generated README (GPU, driver, CUDA, dates, the exact commands, the noise
floor, and what the dataset still lacks against the H100 issue's goals).

  python3 scripts/device/dataset.py STORE DEST [--kace BIN] [--replace]
  python3 scripts/device/dataset.py --verify DEST [--kace BIN]
  python3 scripts/device/dataset.py --docs DEST DOC [--check]
  python3 scripts/device/dataset.py --add-runs OTHER DEST [--kace BIN]

STORE: the last campaign call's store.tar.gz (or a kace.db; the store is
cumulative, so the last one holds every call's runs). DEST is rebuilt: its
profiles/, colocations/, campaign/, ncu/ and README.md are replaced; the
archive itself is kept as DEST/campaign/store.tar.gz, for the next call's
--store (it may be that very file). With
--kace (default build/kace when present) the folder is imported into a
scratch store to prove it reads back, and the comparisons with Nsight Compute
are computed again from ncu's raw exports (ncu/raw/) by `kace import-ncu`.
STORE must continue DEST's campaign: the same GPU model and every call DEST
already holds (its campaign/visits.tsv); otherwise nothing is written, unless
--replace says to start DEST again.

--verify rebuilds DEST from its own campaign/store.tar.gz in a scratch folder
and fails unless every file is the same: DEST was made by this script, never
edited by hand (and, with kace, it imports).

--add-runs puts the measured runs of OTHER (another call's store.tar.gz or
kace.db on the same GPU model, e.g. first light's, whose runs were never in
the campaign's store) into DEST's campaign/store.tar.gz and rebuilds DEST
from it. A run whose identity (set, mode, members, repetition) the store
holds already is left as it is; so is everything else in the store. OTHER's
workloads must be in DEST's store. The next call resumes from that store, so
it does not measure those runs again.

--docs writes DEST's comparison with Nsight Compute (or "not measured yet")
into DOC between the markers
  <!-- BEGIN generated: dataset.py ncu DEST -->  (or, where DOC has no block of
  DEST's own, <!-- BEGIN generated: dataset.py ncu -->)  and  <!-- END generated -->;
with --check it changes nothing and fails when DOC's block differs.
"""
import csv
import gzip
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402  (scripts/device/store.py: the export)

# The H100 issue's goals for the dataset.
GOALS = {"profiles": 12, "pairs": 30, "pair_occur": 5, "triples": 10, "grids": 2, "repeated": 6, "reps": 3,
         "timeslice": 3, "ncu_cuda": 3, "ncu_torch": 2}
BEGIN, END = "<!-- BEGIN generated: dataset.py ncu -->", "<!-- END generated -->"
# What each of the six kernel metrics is, in kace (lib/data/kernels.c, gpu/cupti/inject.c) and in
# ncu (the SpeedOfLight and LaunchStats sections, reduced by lib/data/ncu.c): both are means over
# kernels weighted by kernel duration.
DEFINITIONS = {
    "Threads": ("grid x block threads of every kernel in the counters window (CUPTI Activity)",
                "launch__thread_count of each profiled launch"),
    "Compute (SM) Throughput": ("sm__throughput.avg.pct_of_peak_sustained_elapsed, Range Profiler, first launch "
                                "of each (name, grid, block)", "the same metric of each profiled launch"),
    "DRAM Throughput": ("dram__throughput.avg.pct_of_peak_sustained_elapsed, as above",
                        "the same metric of each profiled launch"),
    "Memory Throughput": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed, as above",
                          "the same metric of each profiled launch"),
    "Registers": ("threads x registers per thread (CUPTI Activity)",
                  "launch__thread_count x floor(launch__registers_per_thread)"),
    "Static Shared Memory": ("blocks x static shared bytes per block (CUPTI Activity)",
                             "grid size x launch__shared_mem_per_block_static"),
}


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
            keep = name in ("kace.db", "plan.txt", "visits.tsv", "profile-cost.tsv", "ncu-cost.tsv",
                            "ncu-nothing.tsv", "ncu-probe.tsv") or \
                (os.path.dirname(name) == "ncu" and name.endswith((".ncu.csv.gz", ".compare.csv")))
            if keep and m.isfile():
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


def visit_gpu(visit):
    """The GPU model of a visits.tsv row ("NAME, DRIVER, MEMORY" in its second field)."""
    return visit[1].split(",")[0].strip() if len(visit) > 1 else ""


def read_visits(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def folder_for(gpu):
    """A dataset folder name for a GPU model: data/h200 for "NVIDIA H200"."""
    for word in re.split(r"[\s-]+", gpu):
        if re.fullmatch(r"[A-Za-z]{1,3}[0-9]{2,4}[A-Za-z]?", word):
            return "data/" + word.lower()
    return "data/<gpu>"


def check_continues(src, dest, visits):
    """Exits unless src's calls continue dest's campaign: one GPU model, and dest's calls first.
    Anything else (another GPU's campaign, an older call's store) would silently replace data."""
    gpus = sorted({visit_gpu(v) for v in visits} - {"", "unknown"})
    if len(gpus) > 1:
        sys.exit("dataset.py: %s mixes GPU models (%s): a dataset is one GPU model's" % (src, ", ".join(gpus)))
    old_path = os.path.join(dest, "campaign", "visits.tsv")
    if not os.path.exists(old_path):
        return
    old = read_visits(old_path)
    old_gpus = sorted({visit_gpu(v) for v in old} - {"", "unknown"})
    if gpus and old_gpus and gpus != old_gpus:
        sys.exit("dataset.py: %s was measured on %s and %s holds %s's: write it into a folder of its own "
                 "(for example %s); nothing written" % (src, gpus[0], dest, old_gpus[0], folder_for(gpus[0])))
    if visits[:len(old)] != old:
        kept = sum(1 for a, b in zip(old, visits) if a == b)
        sys.exit("dataset.py: %s does not continue %s's campaign: %d of the %d calls in %s/campaign/visits.tsv "
                 "are not in it, and their data would be lost; nothing written (pass --replace to start %s "
                 "again)" % (src, dest, len(old) - kept, len(old), dest, dest))


def main(argv):
    args = argv[1:]
    if args and args[0] == "--docs":
        if len(args) not in (3, 4) or (len(args) == 4 and args[3] != "--check"):
            sys.exit(__doc__)
        return docs(args[1], args[2], len(args) == 4)
    kace = "build/kace" if os.path.exists("build/kace") else None
    if "--kace" in args:
        i = args.index("--kace")
        kace = args[i + 1]
        del args[i:i + 2]
    if args and args[0] == "--verify":
        if len(args) != 2:
            sys.exit(__doc__)
        return verify(args[1], kace)
    if args and args[0] == "--add-runs":
        if len(args) != 3:
            sys.exit(__doc__)
        print("%d run(s) of %s added to %s/campaign/store.tar.gz" % (add_runs(args[1], args[2]), args[1], args[2]))
        print(build(os.path.join(args[2], "campaign", "store.tar.gz"), args[2], kace))
        return 0
    replace = "--replace" in args
    args = [a for a in args if a != "--replace"]
    if len(args) != 2:
        sys.exit(__doc__)
    print(build(args[0], args[1], kace, replace))
    return 0


def build(src, dest, kace, replace=False):
    """Writes dest from the store src; returns the README's text."""
    tmp = tempfile.mkdtemp(prefix="kace-dataset.")
    try:
        db_path, plan, visits_path = unpack(src, tmp)
        visits = read_visits(visits_path) if visits_path else []
        if not replace:
            check_continues(src, dest, visits)
        if src.endswith(".tar.gz"):  # kept: the next device call resumes from it (--store)
            shutil.copy(src, os.path.join(tmp, "store-archive.tar.gz"))
        export = os.path.join(tmp, "export")
        store.export(store.connect(db_path), export)
        for sub in ("profiles", "colocations", "campaign"):
            shutil.rmtree(os.path.join(dest, sub), ignore_errors=True)
            os.makedirs(os.path.join(dest, sub))
        for f in sorted(os.listdir(export)):
            if not f.endswith(".csv"):
                continue
            sub = "profiles" if f in ("kernel.csv", "system.csv", "exclusive-by-mps.csv") else \
                "campaign" if f in ("runs.csv", "spread.csv") else "colocations"
            shutil.copy(os.path.join(export, f), os.path.join(dest, sub, f))
        if visits_path:
            shutil.copy(visits_path, os.path.join(dest, "campaign", "visits.tsv"))
        if plan:
            shutil.copy(plan, os.path.join(dest, "campaign", "plan.txt"))
        for f in ("profile-cost.tsv", "ncu-nothing.tsv", "ncu-probe.tsv"):
            if os.path.exists(os.path.join(tmp, f)):
                shutil.copy(os.path.join(tmp, f), os.path.join(dest, "campaign", f))
        if os.path.exists(os.path.join(tmp, "store-archive.tar.gz")):
            shutil.copy(os.path.join(tmp, "store-archive.tar.gz"), os.path.join(dest, "campaign", "store.tar.gz"))
        write_ncu(db_path, tmp, dest, kace)
        readme = write_readme(dest, visits)
        if kace:
            scratch = os.path.join(tmp, "check.db")
            r = subprocess.run([kace, "import", "--quiet", "--db", scratch, dest], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("dataset.py: %s does not import: %s" % (dest, r.stderr.strip()))
        return readme
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_runs(other, dest):
    """Copies other's measured runs that dest's campaign store lacks into that store (rewritten in
    place, its other files unchanged); returns how many."""
    archive = os.path.join(dest, "campaign", "store.tar.gz")
    if not os.path.exists(archive):
        sys.exit("dataset.py: %s has no campaign/store.tar.gz to add runs to" % dest)
    tmp = tempfile.mkdtemp(prefix="kace-dataset.")
    try:
        other_db, _, _ = unpack(other, os.path.join(tmp, "other"))
        work = os.path.join(tmp, "store")
        with tarfile.open(archive) as t:
            members = t.getmembers()
            for m in members:
                if m.isfile() or m.isdir():
                    t.extract(m, work)
        db = os.path.join(work, "kace.db")
        if not os.path.exists(db):
            sys.exit("dataset.py: %s holds no kace.db" % archive)
        visits = read_visits(os.path.join(work, "visits.tsv")) if os.path.exists(os.path.join(work, "visits.tsv")) else []
        con = sqlite3.connect("file:%s" % db, uri=True)
        con.execute("ATTACH DATABASE ? AS other", ("file:%s?mode=ro" % other_db,))
        gpus = {g for (g,) in con.execute("SELECT DISTINCT s.gpu FROM other.runs r JOIN other.sources s ON s.id = r.source_id")}
        own = {visit_gpu(v) for v in visits} - {"", "unknown"}
        if own and not gpus <= own:
            sys.exit("dataset.py: %s's runs were measured on %s and %s holds %s's; nothing added"
                     % (other, ", ".join(sorted(g or "an unknown GPU" for g in gpus)), dest, ", ".join(sorted(own))))
        missing = [n for (n,) in con.execute(
            "SELECT DISTINCT w.name FROM other.run_members m JOIN other.workloads w ON w.id = m.workload_id "
            "WHERE w.name NOT IN (SELECT name FROM main.workloads) ORDER BY w.name")]
        if missing:
            sys.exit("dataset.py: %s's runs measure workloads that %s's store does not hold (%s); nothing added"
                     % (other, dest, ", ".join(missing)))
        added = 0
        with con:
            for rid, set_name, k, status, key, gpu, tool, date, file, mode, rep, at, window in con.execute(
                    "SELECT r.id, r.set_name, r.k, r.status, r.run_key, s.gpu, s.tool, s.date, s.file, r.mode, "
                    "r.repetition, r.measured_at, r.window_s FROM other.runs r JOIN other.sources s ON s.id = r.source_id "
                    "WHERE r.run_key NOT IN (SELECT run_key FROM main.runs) ORDER BY r.id").fetchall():
                con.execute("INSERT OR IGNORE INTO main.sources(gpu, tool, date, file) VALUES(?,?,?,?)", (gpu, tool, date, file))
                (src,) = con.execute("SELECT id FROM main.sources WHERE gpu IS ? AND tool IS ? AND date IS ? AND file = ?",
                                     (gpu, tool, date, file)).fetchone()
                cur = con.execute("INSERT INTO main.runs(set_name, k, status, run_key, source_id, mode, repetition, "
                                  "measured_at, window_s) VALUES(?,?,?,?,?,?,?,?,?)",
                                  (set_name, k, status, key, src, mode, rep, at, window))
                con.execute("INSERT INTO main.run_members(run_id, slot, workload_id, mps_pct, throughput, status, "
                            "throughput_cv, detail) SELECT ?, m.slot, (SELECT id FROM main.workloads WHERE name = w.name), "
                            "m.mps_pct, m.throughput, m.status, m.throughput_cv, m.detail FROM other.run_members m "
                            "JOIN other.workloads w ON w.id = m.workload_id WHERE m.run_id = ?", (cur.lastrowid, rid))
                added += 1
        con.execute("DETACH DATABASE other")
        con.close()
        for f in os.listdir(work):  # SQLite's journal files, if any were left
            if f.startswith("kace.db-"):
                os.remove(os.path.join(work, f))
        out = os.path.join(tmp, "store.tar.gz")
        with tarfile.open(out, "w:gz") as t:
            for m in members:
                path = os.path.join(work, m.name)
                if m.isdir() or (m.isfile() and os.path.exists(path)):
                    info = t.gettarinfo(path, arcname=m.name)
                    info.uid, info.gid, info.uname, info.gname = m.uid, m.gid, m.uname, m.gname
                    if m.name != "./kace.db" and os.path.normpath(m.name) != "kace.db":
                        info.mtime = m.mtime
                    if info.isfile():
                        with open(path, "rb") as f:
                            t.addfile(info, f)
                    else:
                        t.addfile(info)
        shutil.copy(out, archive)
        return added
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tree(root):
    """Relative path -> bytes of every file under root."""
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                files[os.path.relpath(p, root)] = f.read()
    return files


def verify(dest, kace):
    """dest must be exactly what its own store archive gives: generated, never edited by hand,
    and importable (with kace)."""
    archive = os.path.join(dest, "campaign", "store.tar.gz")
    if not os.path.exists(archive):
        sys.exit("dataset.py: %s has no campaign/store.tar.gz to verify it against" % dest)
    tmp = tempfile.mkdtemp(prefix="kace-verify.")
    try:
        again = os.path.join(tmp, os.path.basename(os.path.normpath(dest)))
        build(archive, again, kace)
        have, want = tree(dest), tree(again)
        problems = ["%s: not made by dataset.py" % p for p in sorted(set(have) - set(want))] + \
            ["%s: missing" % p for p in sorted(set(want) - set(have))] + \
            ["%s: differs from what campaign/store.tar.gz gives" % p
             for p in sorted(set(have) & set(want)) if have[p] != want[p]]
        if problems:
            sys.exit("dataset.py: %s is not what its store gives (run: python3 scripts/device/dataset.py "
                     "%s %s):\n  %s" % (dest, archive, dest, "\n  ".join(problems)))
        print("%s: %d files, all as its store gives%s" % (dest, len(have), ", and it imports" if kace else ""))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_tsv(path, key=("workload",)):
    """Rows of a campaign TSV with a header line by their key columns, the last row winning."""
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        return {tuple(r.get(k, "all") for k in key): r for r in csv.DictReader(f, delimiter="\t")}


def write_ncu(db_path, tmp, dest, kace):
    """ncu/: raw/TAG.ncu.csv.gz (ncu's exports; TAG is the workload, NAME.nocache for a run with
    --cache-control none), compare.csv (kace's six kernel metrics against ncu's, computed again
    here by kace import-ncu when kace is given), cost.csv (both tools' wall seconds)."""
    ncu_dir = os.path.join(dest, "ncu")
    shutil.rmtree(ncu_dir, ignore_errors=True)
    src = os.path.join(tmp, "ncu")
    tags = sorted(f[:-len(".compare.csv")] for f in os.listdir(src) if f.endswith(".compare.csv")) \
        if os.path.isdir(src) else []
    if not tags:
        return
    os.makedirs(os.path.join(ncu_dir, "raw"))
    ncu_cost = read_tsv(os.path.join(tmp, "ncu-cost.tsv"), ("workload", "cache_control"))
    prof_cost = read_tsv(os.path.join(tmp, "profile-cost.tsv"))

    def kernels_per_step(name):
        """kace's kernels per sample x the name's batch: one step's launches (None: unknown)."""
        kps = prof_cost.get((name,), {}).get("kernels_per_sample") or ""
        m = re.search(r"_batch([0-9]+)-", name)
        try:
            return int(round(float(kps) * (int(m.group(1)) if m else 1))) if kps else None
        except ValueError:
            return None
    db = store.connect(db_path)
    rows = []
    for tag in tags:
        name, cache = (tag[:-len(".nocache")], "none") if tag.endswith(".nocache") else (tag, "all")
        kind = ncu_cost.get((name, cache), ncu_cost.get((name, "all"), {})).get("kind", "")
        raw = os.path.join(src, tag + ".ncu.csv.gz")
        if os.path.exists(raw):
            shutil.copy(raw, os.path.join(ncu_dir, "raw", tag + ".ncu.csv.gz"))
        if kace and os.path.exists(raw):
            plain, ndb = os.path.join(tmp, "ncu-plain.csv"), os.path.join(tmp, "ncu-%d.db" % len(rows))
            with gzip.open(raw, "rb") as fi, open(plain, "wb") as fo:
                shutil.copyfileobj(fi, fo)
            r = subprocess.run([kace, "import-ncu", "--quiet", "--db", ndb, "--workload", name, plain],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("dataset.py: kace import-ncu of %s: %s" % (raw, r.stderr.strip()))
            n = store.ncu_kernels(plain)
            for m, x, y, rel, within in store.compare_rows(store.metrics(db, name),
                                                          store.metrics(store.connect(ndb), name)):
                rows.append([name, kind, cache, m, x, y, rel, within, n, kernels_per_step(name)])
        else:
            for r in read_csv(os.path.join(src, tag + ".compare.csv")):
                vals = [float(r[c]) if r[c] else None for c in ("kace", "ncu", "rel_diff")]
                rows.append([name, kind, cache, r["metric"]] + vals +
                            [None if not r["within_10pct"] else r["within_10pct"] == "yes", int(r["ncu_kernels"]),
                             kernels_per_step(name)])
    with open(os.path.join(ncu_dir, "compare.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "kind", "ncu_cache_control", "metric", "kace", "ncu", "rel_diff", "within_10pct",
                    "ncu_kernels", "kace_kernels_per_step"])
        for r in rows:
            w.writerow(r[:4] + ["" if v is None else "%.6g" % v for v in r[4:7]] +
                       ["" if r[7] is None else ("yes" if r[7] else "no"), r[8],
                        "" if r[9] is None or r[1] == "cuda" else r[9]])
    with open(os.path.join(ncu_dir, "cost.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "kind", "kace_profile_s", "kace_kernels", "kace_kernels_with_counters", "ncu_s",
                    "ncu_launch_skip", "ncu_kernels", "kace_over_ncu"])
        for tag in tags:
            if tag.endswith(".nocache"):
                continue
            p, c = prof_cost.get((tag,)), ncu_cost.get((tag, "all"))
            if not p or not c:
                continue
            ratio = float(p["wall_s"]) / float(c["wall_s"]) if float(c["wall_s"]) > 0 else None
            w.writerow([tag, c["kind"], p["wall_s"], p["kernels"], p["with_counters"], c["wall_s"], c["launch_skip"],
                        c["kernels"], "" if ratio is None else "%.3g" % ratio])


def fmt(v):
    if v is None or v == "":
        return "–"
    v = float(v)
    return "%.4g" % v if abs(v) < 1e5 else "%.3e" % v


def ncu_markdown(dest, shown=None):
    """The comparison with Nsight Compute as Markdown: kace's difference from ncu for each
    workload and metric, every metric outside 10% with both definitions, the profiling cost.
    shown: dest as the text names it ("" inside dest's own README)."""
    rows = read_csv(os.path.join(dest, "ncu", "compare.csv"))
    cost = read_csv(os.path.join(dest, "ncu", "cost.csv"))
    if not rows:
        text = ("Not measured yet: no GPU visit has brought back a comparison with Nsight Compute "
                "(`%s` is absent). The campaign makes it (docs/gpu.md, section 5)." %
                os.path.join(dest.rstrip("/") if shown is None else shown, "ncu", "compare.csv"))
        # What the calls whose ncu profiled nothing, and the probes after the first, saw.
        nothing = os.path.join(dest, "campaign", "ncu-nothing.tsv")
        probe = os.path.join(dest, "campaign", "ncu-probe.tsv")
        named = dest.rstrip("/") if shown is None else shown  # dest as the text names it
        if os.path.exists(nothing):
            with open(nothing) as f:
                calls = [line.rstrip("\n").split("\t") for line in f if line.strip()]
            text += ("\n\nncu profiled no launch in %d call%s (`%s`): %s." %
                     (len(calls), "" if len(calls) == 1 else "s", os.path.join(named, "campaign", "ncu-nothing.tsv"),
                      "; ".join("%s, `%s`" % (c[0], c[2]) for c in calls if len(c) >= 3)))
        if os.path.exists(probe):
            with open(probe) as f:
                for line in f:
                    c = line.rstrip("\n").split("\t")
                    if len(c) >= 4:
                        text += "\n\nProbes (`%s`), %s on %s, `%s`: %s." % (
                            os.path.join(named, "campaign", "ncu-probe.tsv"), c[0], c[1], c[2], c[3])
        return text
    compare = [r for r in rows if r.get("ncu_cache_control", "all") == "all"]
    nocache = {(r["workload"], r["metric"]): r for r in rows if r.get("ncu_cache_control") == "none"}
    out = []
    w = out.append
    metrics = list(DEFINITIONS)
    cell = {}
    order = []
    for r in rows:
        key = (r["workload"], r.get("ncu_cache_control", "all"))
        if key not in order:
            order.append(key)
        cell[key + (r["metric"],)] = r
    def part_of_step(r):
        step = r.get("kace_kernels_per_step") or ""
        return bool(step) and int(r["ncu_kernels"]) < int(step)

    w("kace's value minus ncu's, relative to ncu's (`ncu/compare.csv`); **bold**: outside 10%. ncu ran with its")
    w("default `--cache-control all` (caches flushed before each replay pass, as in KACE's ncu runs); the CUDA C")
    w("workloads also with `--cache-control none` (kace's replay flushes nothing). For PyTorch, \"step ~M\" is one")
    w("step's launches by kace's count (kernels per sample × batch); \"part\" marks an ncu run that covered less.")
    w("")
    w("| workload | kind | ncu kernels | " + " | ".join(metrics) + " |")
    w("|---|---|---|" + "---|" * len(metrics))
    for name, cache in order:
        got = [cell.get((name, cache, m)) for m in metrics]
        kind = next((r["kind"] for r in got if r), "")
        first = next((r for r in got if r), None)
        kernels = first["ncu_kernels"] if first else ""
        if first and first.get("kace_kernels_per_step"):
            kernels += " (step ~%s%s)" % (first["kace_kernels_per_step"], ", part" if part_of_step(first) else "")
        cells = []
        for r in got:
            if not r or r["within_10pct"] == "":
                cells.append("missing")
            elif r["rel_diff"] == "":
                cells.append("**ncu 0**")
            else:
                t = "%+.1f%%" % (100 * float(r["rel_diff"]))
                cells.append(t if r["within_10pct"] == "yes" else "**%s**" % t)
        label = "`%s`" % name + ("" if cache == "all" else " (no cache flush)")
        w("| %s | %s | %s | %s |" % (label, kind, kernels, " | ".join(cells)))
    within = sum(1 for r in compare if r["within_10pct"] == "yes")
    judged = sum(1 for r in compare if r["within_10pct"] != "")
    w("")
    partial = sum(1 for r in compare if r["within_10pct"] != "" and part_of_step(r))
    w("%d of %d metric values within 10%% of ncu's default run%s." % (
        within, judged, "" if not partial else " (%d of them from ncu runs that covered part of a step: their means "
        "weigh other kernels than kace's)" % partial))
    misses = [r for r in compare if r["within_10pct"] != "yes"]
    if misses:
        w("")
        w("Open differences (every value outside 10% of ncu's default run, or missing), with both definitions:")
        w("")
        w("| workload | metric | kace | ncu | ncu, no cache flush | kace measures | ncu measures |")
        w("|---|---|---|---|---|---|---|")
        for r in misses:
            d = DEFINITIONS.get(r["metric"], ("", ""))
            nc = nocache.get((r["workload"], r["metric"]))
            w("| `%s` | %s | %s | %s | %s | %s | %s |" % (r["workload"], r["metric"], fmt(r["kace"]), fmt(r["ncu"]),
                                                         fmt(nc["ncu"]) if nc else "–", d[0], d[1]))
    if cost:
        w("")
        w("Profiling cost (`ncu/cost.csv`): kace profile's wall time (its clean and counters runs, warm-ups and")
        w("windows included) against ncu's default run (start, the skipped launches, the profiled ones).")
        w("")
        w("| workload | kind | kace profile (s) | kace kernels (with counters) | ncu (s) | ncu kernels | kace / ncu |")
        w("|---|---|---|---|---|---|---|")
        ratios = []
        for r in cost:
            w("| `%s` | %s | %s | %s (%s) | %s | %s | %s |" % (r["workload"], r["kind"], fmt(r["kace_profile_s"]),
                                                            r["kace_kernels"], r["kace_kernels_with_counters"],
                                                            fmt(r["ncu_s"]), r["ncu_kernels"], fmt(r["kace_over_ncu"])))
            if r["kace_over_ncu"]:
                ratios.append(float(r["kace_over_ncu"]))
        if ratios:
            w("")
            w("kace / ncu wall time: median %.3g (%.3g to %.3g), over %d workloads. ncu profiled only the launches"
              % (statistics.median(ratios), min(ratios), max(ratios), len(ratios)))
            w("named above; kace timed every kernel of its window and replayed the first launch of each kernel.")
    return "\n".join(out)


def docs(dest, doc, check):
    with open(doc) as f:
        text = f.read()
    # A document may hold one block per dataset: "<!-- BEGIN generated: dataset.py ncu
    # data/h200 -->" is DEST's own; the plain marker is the block of any other DEST.
    # DEST's block is the one whose name ends DEST's path, however DEST is spelled.
    begin, shown = BEGIN, None
    prefix = BEGIN[:-len(" -->")] + " "
    for m in re.finditer(re.escape(prefix) + r"(\S+) -->", text):
        if (os.path.abspath(dest) + "/").endswith("/" + m.group(1).strip("/") + "/"):
            begin, shown = m.group(0), m.group(1)
            break
    if begin not in text or END not in text[text.index(begin):]:
        sys.exit("dataset.py: %s has no %s ... %s block" % (doc, begin, END))
    i = text.index(begin) + len(begin)
    j = text.index(END, i)
    new = text[:i] + "\n" + ncu_markdown(dest, shown) + "\n" + text[j:]
    if new == text:
        print("%s: the ncu block is up to date with %s" % (doc, dest))
        return 0
    if check:
        print("%s: the ncu block differs from what %s gives; run: python3 scripts/device/dataset.py --docs %s %s"
              % (doc, dest, dest, doc), file=sys.stderr)
        return 1
    with open(doc, "w") as f:
        f.write(new)
    print("%s: ncu block written from %s" % (doc, dest))
    return 0


# kace_proc_ending's phrases, the first match counting (a group killed by SIGKILL
# is counted so even when its leader stopped at its report).
ENDINGS = [("killed by SIGKILL", "killed by SIGKILL, themselves or part of their group, at the end of the grace"),
           ("before its next report", "ended after SIGTERM before their next report (mid-step: by the signal, "
            "or by a handler of their own)"),
           ("stopped at its next report after", "stopped at their next report (the step-boundary stop)"),
           ("paused in the pool", "paused at a step boundary in the warm pool (`kace campaign --pool`), kept for "
            "later runs"),
           ("on its own", "ended on their own (a crash, an early exit)")]
OTHER_ENDINGS = ("after SIGTERM", "never started")


def endings_markdown(runs):
    """How the members' processes ended (kace measure stores it with each member)."""
    if not runs:
        return "No run measured yet."
    counts = {k: 0 for k, _ in ENDINGS}
    other = unknown = 0
    for r in runs:
        d = r.get("detail") or ""
        key = next((k for k, _ in ENDINGS if k in d), None)
        if key:
            counts[key] += 1
        elif any(o in d for o in OTHER_ENDINGS):
            other += 1
        else:
            unknown += 1
    lines = ["Each member of each run (`campaign/runs.csv`, column `detail`), by how kace's stop ended its process.",
             "NVIDIA's MPS documentation warns that a client ended with GPU work outstanding can leave the server",
             "and its other clients in an undefined state: the step-boundary stop is meant to avoid that.", ""]
    # The pool's line only once a pool measured (datasets made before it stay as they are).
    lines += ["- %d %s" % (counts[k], words) for k, words in ENDINGS if counts[k] or k != "paused in the pool"]
    if other:
        lines.append("- %d otherwise (another exit or signal after SIGTERM, or never started)" % other)
    if unknown:
        lines.append("- %d not recorded (measured by a kace that did not store it)" % unknown)
    return "\n".join(lines)


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

    ncu_kinds = {r["workload"]: r["kind"] for r in read_csv(os.path.join(dest, "ncu", "compare.csv"))
                 if r.get("ncu_cache_control", "all") == "all"}
    have = {
        "ncu_cuda": sum(1 for k in ncu_kinds.values() if k == "cuda"),
        "ncu_torch": sum(1 for k in ncu_kinds.values() if k in ("torch", "llm")),
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
        "ncu_cuda": "CUDA C workloads compared with ncu",
        "ncu_torch": "PyTorch workloads compared with ncu",
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
    for k in ("profiles", "pairs", "pair_occur", "triples", "grids", "repeated", "timeslice", "ncu_cuda", "ncu_torch"):
        w("| %s | %d | %d | %s |" % (label[k], have[k], GOALS[k], "met" if have[k] >= GOALS[k] else "**missing**"))
    w("")
    w("Workloads: " + ", ".join("`%s`" % p for p in profiled) + ".")
    w("Kernel metrics for %d of them." % len(kernel))
    curves = read_csv(os.path.join(dest, "profiles", "exclusive-by-mps.csv"))
    if curves:
        shares = [c for c in curves[0] if c != "workload"]
        whole = sum(1 for r in curves if all(r.get(c) not in ("", None) for c in shares))
        w("Exclusive throughput alone under MPS at %s%% (the split advisor's and the placer's curve): %d workload(s),"
          % (", ".join(shares), len(curves)))
        w("%d of them at every one of those shares." % whole)
    else:
        w("Exclusive throughput alone under MPS at other shares: not measured yet.")
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
    w("## How the workloads ended")
    w("")
    w(endings_markdown(runs))
    w("")
    w("## kace against Nsight Compute")
    w("")
    w(ncu_markdown(dest, shown=""))
    w("")
    w("## Files")
    w("")
    w("- `profiles/kernel.csv`, `profiles/system.csv`: each workload alone (CUPTI kernel metrics, NVML system")
    w("  metrics, exclusive throughput and its spread); `profiles/exclusive-by-mps.csv`: alone under MPS at")
    w("  a thread percentage (`kace measure W --mps-pct P`), when measured.")
    w("- `colocations/pairs.csv`, `triples.csv` (100/100 MPS), `mps-splits.csv` (other MPS splits),")
    w("  `timeslice-pairs.csv` (no MPS): each member's throughput, the mean over its ok repetitions.")
    w("- `campaign/runs.csv` (every run and member, failed ones included), `spread.csv`, `plan.txt`,")
    w("  `visits.tsv`, `profile-cost.tsv` (each profile's wall time and kernel counts): the campaign's own")
    w("  records; `kace import` recognises and skips the CSVs. `ncu-nothing.tsv` and `ncu-probe.tsv`, where")
    w("  present: the calls whose ncu profiled no launch, and what the probes after the first one found.")
    w("- `campaign/store.tar.gz`: the campaign's store as the last call left it (kace.db, the frozen plan,")
    w("  the ncu runs); the next call resumes from it: `campaign.sh OUT --store data/h100/campaign/store.tar.gz`.")
    w("- `ncu/raw/*.ncu.csv.gz`: Nsight Compute's exports (`ncu -i REPORT --csv --print-details all`);")
    w("  `ncu/compare.csv`: kace's six kernel metrics against ncu's, reduced by `kace import-ncu`;")
    w("  `ncu/cost.csv`: both tools' wall times.")
    w("")
    w("## The exact commands")
    w("")
    w("```")
    w("make device-bundle                                  # here: build-bundle/kace-bundle.tar.gz")
    w("bash scripts/device/first-light.sh OUT              # on the GPU server, once")
    w("bash scripts/device/campaign.sh OUT --minutes 8 [--store data/h100/campaign/store.tar.gz]   # each call")
    w("python3 scripts/device/dataset.py OUT/store.tar.gz data/h100                  # here, this folder")
    w("python3 scripts/device/dataset.py --docs data/h100 docs/gpu.md                # its ncu tables in the docs")
    w("tools/gpu-report.py --update docs/h100.md                                      # its evaluation in the docs")
    w("kace demo --data data/h100%s%s" % (" --gpu '%s'" % gpu_name if visits else "", " --gpu-memory %d" % mem if mem else ""))
    w("```")
    text = "\n".join(out) + "\n"
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv))
