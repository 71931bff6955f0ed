#!/usr/bin/env python3
"""Reads kace's store with Python's sqlite3 module (GPU servers often have no
sqlite3 program). Used by first-light.sh and campaign.sh.

  store.py profiled DB                    workloads with an exclusive throughput, one a line
  store.py ncu-compare DB NAME NCU_DB NCU_CSV OUT
                                          kace's six kernel metrics of NAME (its profile in DB)
                                          against ncu's (NAME in NCU_DB, imported from NCU_CSV)
  store.py summary DB                     one line: what the store holds of measured runs
  store.py checkpoint DB                  moves the WAL of a killed writer into DB
  store.py ncu-slim NCU_CSV OUT           the rows of an ncu --csv export that kace import-ncu reads
  store.py export DB DIR                  CSV files in the layouts `kace import` reads
"""
import csv
import math
import os
import sqlite3
import sys

KERNEL = ["Threads", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "Registers",
          "Static Shared Memory"]
KERNEL_MORE = ["Short_Kernel", "avg_Thread", "Long_Kernel", "ave_Kernel_Length", "long/short_Ratio"]
SYSTEM_MORE = ["exclusive_throughput_sd", "pcie_tx_MBps", "pcie_rx_MBps", "power_W", "sm_clock_MHz", "CPU%", "MainMem%"]


def connect(path):
    if not os.path.exists(path):
        sys.exit("store.py: no store at %s" % path)
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)
    return db


def has_column(db, table, col):
    return any(r[1] == col for r in db.execute("PRAGMA table_info(%s)" % table))


def profiled(db):
    for (name,) in db.execute("SELECT w.name FROM profiles p JOIN workloads w ON w.id = p.workload_id "
                              "WHERE p.metric = 'exclusive_throughput' AND p.value > 0 ORDER BY w.name"):
        print(name)


def metrics(db, name):
    return {m: v for m, v in db.execute("SELECT p.metric, p.value FROM profiles p JOIN workloads w "
                                        "ON w.id = p.workload_id WHERE w.name = ?", (name,))}


TOLERANCE = 0.10  # the H100 issue: each of kace's six kernel metrics within 10% of ncu's


def ncu_kernels(path):
    """Kernel launches in an ncu --csv export: the distinct "ID" values with a Duration row
    (a device table inside the export has IDs too)."""
    ids = set()
    with open(path, newline="", errors="replace") as f:
        col = name = None
        for row in csv.reader(line for line in f if not line.startswith("==")):
            if "ID" in row and "Metric Name" in row:
                col, name = row.index("ID"), row.index("Metric Name")
            elif col is not None and len(row) > max(col, name) and row[name] in ("Duration", "gpu__time_duration.sum"):
                ids.add(row[col])
    return len(ids)


# The metric names (and aliases) that kace import-ncu reads (lib/data/ncu.c); ncu-slim keeps
# only their rows.
NCU_METRICS = {"Duration", "gpu__time_duration.sum", "Threads", "launch__thread_count", "Compute (SM) Throughput",
               "Compute (SM) [%]", "SM [%]", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput", "Memory [%]",
               "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Registers Per Thread",
               "launch__registers_per_thread", "Static Shared Memory Per Block",
               "launch__shared_mem_per_block_static", "Grid Size", "launch__grid_size", "Block Size",
               "launch__block_size"}


def ncu_slim(src, dst):
    """An ncu --csv export cut to the rows kace import-ncu reads: each header line with a
    "Metric Name" column, and the rows of the metrics above. --print-details all repeats
    long kernel names on every row; a PyTorch run of 2000 kernels is tens of MB."""
    kept = dropped = 0
    with open(src, newline="", errors="replace") as f, open(dst, "w", newline="") as g:
        w = csv.writer(g, quoting=csv.QUOTE_ALL, lineterminator="\n")
        col = None
        for row in csv.reader(line for line in f if not line.startswith("==")):
            if "Metric Name" in row and "ID" in row:
                col = row.index("Metric Name")
                w.writerow(row)
            elif col is not None and len(row) > col and row[col] in NCU_METRICS:
                w.writerow(row)
                kept += 1
            else:
                dropped += 1
    print("%d metric rows kept, %d other lines left out" % (kept, dropped))
    return 0 if kept else 1


def compare_rows(kace, ncu):
    """(metric, kace, ncu, rel_diff, within) for the six kernel metrics; rel_diff is
    (kace - ncu) / ncu, 0 when both are 0, None when one is missing or only ncu's is 0."""
    rows = []
    for m in KERNEL:
        x, y = kace.get(m), ncu.get(m)
        rel = None
        if x is not None and y is not None:
            rel = (x - y) / y if y != 0 else (0.0 if x == 0 else None)
        within = None if x is None or y is None else (rel is not None and abs(rel) <= TOLERANCE)
        rows.append((m, x, y, rel, within))
    return rows


def ncu_compare(db, name, ncu_db, ncu_csv, out):
    """kace's six kernel metrics of NAME (profile in db) against ncu's (NAME in ncu_db,
    imported from ncu_csv by `kace import-ncu`): one CSV row per metric."""
    rows = compare_rows(metrics(db, name), metrics(ncu_db, name))
    n = ncu_kernels(ncu_csv)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "metric", "kace", "ncu", "rel_diff", "within_10pct", "ncu_kernels"])
        for m, x, y, rel, within in rows:
            w.writerow([name, m] + ["" if v is None else "%.6g" % v for v in (x, y, rel)] +
                       ["" if within is None else ("yes" if within else "no"), n])
    both = [r for r in rows if r[4] is not None]
    if not both:
        print("no kernel metric in both kace's profile and ncu's (%d kernels in ncu's report)" % n)
        return 1
    worst = max(both, key=lambda r: abs(r[3]) if r[3] is not None else float("inf"))
    print("%d/%d metrics in both, %d within 10%%; largest difference %s %s; %d kernels in ncu's report" % (
        len(both), len(rows), sum(1 for r in both if r[4]), worst[0],
        "%+.1f%%" % (100 * worst[3]) if worst[3] is not None else "(ncu 0)", n))
    return 0


def measured(db):
    if not has_column(db, "runs", "mode"):
        return []
    return db.execute("SELECT r.id, r.k, r.mode, r.status, r.run_key, r.repetition, "
                      "(SELECT min(mps_pct) = 100 FROM run_members m WHERE m.run_id = r.id) "
                      "FROM runs r WHERE r.mode IS NOT NULL").fetchall()


def base_key(key, rep):
    return key.replace("|#%d" % rep, "")


def summary(db):
    runs = measured(db)
    ok = [r for r in runs if r[3] == "ok"]
    pairs = {base_key(r[4], r[5]) for r in ok if r[2] == "mps" and r[1] == 2 and r[6]}
    triples = {base_key(r[4], r[5]) for r in ok if r[2] == "mps" and r[1] == 3}
    splits = [r for r in ok if r[2] == "mps" and not r[6] and r[1] >= 2]
    ts = [r for r in ok if r[2] == "timeslice" and r[1] >= 2]
    solo = [r for r in ok if r[1] == 1]
    print("runs %d ok %d failed %d pairs %d triples %d splits %d timeslice %d profiled %d solo %d" % (
        len(runs), len(ok), len(runs) - len(ok), len(pairs), len(triples), len(splits), len(ts),
        db.execute("SELECT count(*) FROM profiles WHERE metric = 'exclusive_throughput'").fetchone()[0], len(solo)))


def write(path, header, rows, keep_empty=True):
    if not rows and not keep_empty:
        return
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])


def in_order_of(first, members):
    """members in the slot order of first (the same workloads and shares, maybe measured as B + A)."""
    left = list(members)
    ordered = []
    for m in first:
        i = next(j for j, x in enumerate(left) if (x[8], x[9]) == (m[8], m[9]))
        ordered.append(left.pop(i))
    return ordered


def export(db, out):
    os.makedirs(out, exist_ok=True)
    names = [r[0] for r in db.execute("SELECT DISTINCT w.name FROM workloads w JOIN profiles p "
                                      "ON p.workload_id = w.id ORDER BY w.name")]
    prof = {n: metrics(db, n) for n in names}
    # Profiles: the kernel and system layouts of the reference data.
    # Every metric kace measured: the kernel-length metrics of the Xu et al.
    # baseline, NVML's PCIe, power and clock, and the host's CPU% and MainMem%.
    kernel = KERNEL + [m for m in KERNEL_MORE if any(m in prof[n] for n in names)]
    system = [m for m in SYSTEM_MORE if any(m in prof[n] for n in names)]
    write(os.path.join(out, "kernel.csv"), kernel + ["Type"],
          [[prof[n].get(m) for m in kernel] + [n] for n in names if any(m in prof[n] for m in KERNEL)])
    write(os.path.join(out, "system.csv"), ["Type", "Exclusive100", "sm%", "mem%", "memcap"] + system,
          [[n, prof[n].get("exclusive_throughput"), prof[n].get("sm%"), prof[n].get("mem%"), prof[n].get("memcap")] +
           [prof[n].get(m) for m in system] for n in names if "exclusive_throughput" in prof[n]])
    # Exclusive throughput alone under MPS at a share (a solo `kace measure --mps-pct P` stores it
    # as exclusive_mps<P>): the "exclusive by MPS %" layout, a column per share measured.
    pcts = sorted({int(m[len("exclusive_mps"):]) for n in names for m in prof[n] if m.startswith("exclusive_mps")})
    if pcts:
        write(os.path.join(out, "exclusive-by-mps.csv"), ["workload"] + [str(p) for p in pcts],
              [[n] + [prof[n].get("exclusive_mps%d" % p) for p in pcts] for n in names
               if any("exclusive_mps%d" % p in prof[n] for p in pcts)])
    if not has_column(db, "runs", "mode"):
        return 0
    rows = db.execute(
        "SELECT r.id, r.set_name, r.mode, r.repetition, r.status, r.measured_at, r.window_s, m.slot, w.name, "
        "m.mps_pct, m.throughput, m.throughput_cv, m.status, m.detail FROM runs r JOIN run_members m "
        "ON m.run_id = r.id JOIN workloads w ON w.id = m.workload_id WHERE r.mode IS NOT NULL "
        "ORDER BY r.id, m.slot").fetchall()
    write(os.path.join(out, "runs.csv"), ["run", "set", "mode", "repetition", "run_status", "measured_at", "window_s",
                                          "slot", "workload", "mps_pct", "throughput", "throughput_cv", "status",
                                          "detail"], rows)
    # Colocations for training: the mean over ok repetitions, one file per k and mode, in
    # exactly the columns `kace import` knows (how many repetitions: runs.csv, spread.csv).
    runs = {}
    for r in rows:
        runs.setdefault(r[0], {"mode": r[2], "rep": r[3], "status": r[4], "members": []})["members"].append(r)
    keys = dict(db.execute("SELECT id, run_key FROM runs WHERE mode IS NOT NULL"))
    groups = {}
    for rid, r in runs.items():
        k = len(r["members"])
        if r["status"] != "ok" or k < 2:  # a solo run is a profile value (exclusive-by-mps.csv)
            continue
        all100 = all(m[9] == 100 for m in r["members"])
        kind = ("pairs" if k == 2 else "triples" if k == 3 else "k%d" % k) if r["mode"] == "mps" and all100 else \
            ("mps-splits" if k == 2 else "mps-splits-k%d" % k) if r["mode"] == "mps" else \
            ("timeslice-pairs" if k == 2 else "timeslice-k%d" % k)
        # One colocation whatever set it was measured in: its members, their shares and the mode
        # (kace import refuses a colocation given twice in a file).
        identity = (r["mode"], tuple(sorted((m[8], m[9]) for m in r["members"])))
        g = groups.setdefault(kind, {}).setdefault(identity, {"key": base_key(keys[rid], r["rep"]), "reps": []})
        g["reps"].append(in_order_of(g["reps"][0], r["members"]) if g["reps"] else r["members"])
    for kind, cols in groups.items():
        k = len(next(iter(cols.values()))["reps"][0])
        header = ["workload%d" % (i + 1) for i in range(k)] + ["w%dthroughput" % (i + 1) for i in range(k)] + \
                 ["w%dmps_pct" % (i + 1) for i in range(k)]
        out_rows = []
        for col in cols.values():
            reps = col["reps"]
            first = reps[0]
            thr = []
            for i in range(k):
                v = [m[i][10] for m in reps if m[i][10] is not None]
                thr.append(sum(v) / len(v) if v else None)
            out_rows.append([m[8] for m in first] + thr + [m[9] for m in first])
        out_rows.sort(key=lambda r: (r[0], r[1]))
        write(os.path.join(out, kind + ".csv"), header, out_rows)
    # Run-to-run spread: each member of every colocation measured ok >= 2 times.
    spread = []
    for kind, cols in groups.items():
        for col in cols.values():
            key, reps = col["key"], col["reps"]
            if len(reps) < 2:
                continue
            for i in range(len(reps[0])):
                v = [m[i][10] for m in reps if m[i][10] is not None]
                if len(v) < 2:
                    continue
                mean = sum(v) / len(v)
                sd = math.sqrt(max(sum(x * x for x in v) / len(v) - mean * mean, 0))
                spread.append([key, reps[0][i][8], len(v), mean, sd, sd / mean if mean else None])
    spread.sort(key=lambda r: -(r[5] or 0))
    write(os.path.join(out, "spread.csv"), ["colocation", "workload", "repetitions", "mean", "sd", "cv"], spread)
    return 0


def checkpoint(path):
    """Moves a killed writer's WAL into the database file, so that the file alone is the store."""
    if not os.path.exists(path):
        sys.exit("store.py: no store at %s" % path)
    db = sqlite3.connect(path, timeout=10)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return 0


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    if argv[1] == "checkpoint" and len(argv) == 3:
        return checkpoint(argv[2])
    if argv[1] == "ncu-slim" and len(argv) == 4:
        return ncu_slim(argv[2], argv[3])
    cmd, db = argv[1], connect(argv[2])
    if cmd == "profiled":
        return profiled(db)
    if cmd == "ncu-compare" and len(argv) == 7:
        return ncu_compare(db, argv[3], connect(argv[4]), argv[5], argv[6])
    if cmd == "summary":
        return summary(db)
    if cmd == "export" and len(argv) == 4:
        return export(db, argv[3])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
