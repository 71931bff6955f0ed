#!/usr/bin/env python3
"""The evaluation of kace on its own GPU dataset (data/h100), generated.

  tools/gpu-report.py [--kace BIN] [--data DIR] [--v100 DIR] [--work DIR]
                      [--update DOC | --check DOC]

Imports DIR (default data/h100) and the paper's V100 data (default
../shared/data/kace-v100) into fresh stores under --work (default: a
temporary folder, removed at the end) and runs:

  kace eval --db gpu.db --mode both --out W/paper
      the paper's experiments: the training-size study (n_occur splits made the
      way the KACE artifact made its own), unseen families, triples
  kace eval --db gpu.db --protocol leave-family-out --mode both --out W/lfo
  kace eval --db gpu.db --protocol leave-workload-out --train-db v100.db --mode both --no-xu --out W/v100-to-gpu
  kace eval --db v100.db --protocol leave-workload-out --train-db gpu.db --mode both --no-xu --out W/gpu-to-v100
  kace eval --db gpu.db --splits --train-db v100.db --no-figures --out W/splits
      (when DIR has MPS split grids, even with too few pairs for the rest) the
      split advisor fitted on the V100's grids, advising this GPU's: its own
      few grids cannot fit the model

Xu et al. runs on this GPU's data with NVML's PCIe throughput in place of
ncu's PCIe bandwidth (kace eval says so), and is left out across GPUs, where
the two would meet. It prints the tables as Markdown; --update DOC
writes them between the markers
  <!-- BEGIN generated: gpu-report.py -->  and  <!-- END generated -->
and copies the figures named there into DOC's folder img/<dataset>/;
--check DOC changes nothing and fails when DOC's block differs (the figures
are not compared: gnuplot versions draw differently). Without DIR the block
says that nothing was measured yet. Only the data and the code decide the
output: timings are never printed.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

BEGIN, END = "<!-- BEGIN generated: gpu-report.py -->", "<!-- END generated -->"
POLICIES = ["kace", "KACE", "Best rule", "MEMCAP", "Random"]
MIN_PAIRS = 10  # fewer pairs leave most workloads with one candidate or none: nothing to choose
# Figures copied next to the document: (file under --work, name in img/<dataset>/).
FIGURES = [("paper/fig3_training_size_clean.png", "training_size_clean.png"),
           ("lfo/protocol_leave-family-out_pairs_clean.png", "leave_family_out_clean.png"),
           ("v100-to-gpu/protocol_leave-workload-out_pairs_clean.png", "v100_to_gpu_clean.png"),
           ("gpu-to-v100/protocol_leave-workload-out_pairs_clean.png", "gpu_to_v100_clean.png")]


def die(msg):
    sys.exit("gpu-report.py: " + msg)


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(v):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def f3(v):
    x = num(v)
    return "–" if x is None else "%.3f" % x


def run(cmd, log):
    with open(log, "w") as out:
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        with open(log) as f:
            tail = f.read()[-2000:]
        die("%s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, tail))


def count_rows(path):
    return len(read_csv(path))


def gpu_name(data):
    path = os.path.join(data, "campaign", "visits.tsv")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) > 1 and parts[1].strip():
                return parts[1].split(",")[0].strip()
    return None


def evaluate(kace, data, v100, work):
    gdb, vdb = os.path.join(work, "gpu.db"), os.path.join(work, "v100.db")
    for db in (gdb, vdb):
        if os.path.exists(db):
            os.remove(db)
    run([kace, "import", "--quiet", "--db", gdb, data], os.path.join(work, "import-gpu.txt"))
    run([kace, "import", "--quiet", "--db", vdb, v100], os.path.join(work, "import-v100.txt"))
    if has_split_grids(data):
        run([kace, "eval", "--db", gdb, "--splits", "--train-db", vdb, "--no-figures",
             "--out", os.path.join(work, "splits")], os.path.join(work, "splits.txt"))
    if count_rows(os.path.join(data, "colocations", "pairs.csv")) < MIN_PAIRS:
        return
    # Xu et al. on this GPU's own data only: its PCIe features come from
    # NVML here and from ncu on the V100, so across GPUs it is left out.
    common = ["--mode", "both", "--no-xu"]
    run([kace, "eval", "--db", gdb, "--mode", "both", "--out", os.path.join(work, "paper")],
        os.path.join(work, "paper.txt"))
    run([kace, "eval", "--db", gdb, "--protocol", "leave-family-out", "--mode", "both",
         "--out", os.path.join(work, "lfo")], os.path.join(work, "lfo.txt"))
    run([kace, "eval", "--db", gdb, "--protocol", "leave-workload-out", "--train-db", vdb] + common +
        ["--out", os.path.join(work, "v100-to-gpu")], os.path.join(work, "v100-to-gpu.txt"))
    run([kace, "eval", "--db", vdb, "--protocol", "leave-workload-out", "--train-db", gdb] + common +
        ["--out", os.path.join(work, "gpu-to-v100")], os.path.join(work, "gpu-to-v100.txt"))


def has_split_grids(data):
    return count_rows(os.path.join(data, "colocations", "mps-splits.csv")) > 0


def splits_section(w, data, work, name):
    """The split advisor on this GPU's grids, fitted on the V100's."""
    w("")
    w("### MPS thread splits (fitted on the V100's grids)")
    w("")
    if not has_split_grids(data):
        w("No MPS split grid measured yet (`colocations/mps-splits.csv`).")
        return
    cases = read_csv(os.path.join(work, "splits", "splits_cases.csv"))
    w("The split model needs about 10 grids (92 measured cells) to be fitted on one GPU's data, and the")
    w("campaign measures 2 here; so each grid of %s is advised by the model fitted on the V100's 560" % name)
    w("grids, less those of the advised pair (by name), reading this GPU's profiles and MPS curves")
    w("(`kace eval --splits --train-db`).")
    w("")
    if not cases:
        w("No grid here has both members with a profile and an MPS curve of at least 5 shares: nothing to score.")
        return
    w("Measured value of the advised split / best measured split, mean over %d grid(s):" % len(cases))
    w("")
    w("| policy | advisor | 50/50 | 100/100 |")
    w("|---|---|---|---|")
    for r in read_csv(os.path.join(work, "splits", "splits_advisor.csv")):
        w("| %s | %s | %s | %s |" % (r["policy"], f3(r.get("advisor")), f3(r.get("fixed50")), f3(r.get("fixed100"))))
    lat = [r for r in read_csv(os.path.join(work, "splits", "splits_latency.csv")) if (num(r.get("cases")) or 0) > 0]
    if lat:
        w("")
        w("Latency policy (the grid's first member is latency-sensitive): how often its share of its exclusive")
        w("throughput meets the target, over the grids where a measured split meets it.")
        w("")
        w("| LS target | grids | advisor | 50/50 | 100/100 | best effort / Oracle |")
        w("|---|---|---|---|---|---|")
        for r in lat:
            w("| %s%% | %s | %s | %s | %s | %s |" % (r["target_pct"], r["cases"], f3(r.get("advisor")),
                                                   f3(r.get("fixed50")), f3(r.get("fixed100")), f3(r.get("be_oracle"))))


def protocol_rows(work, sub, protocol):
    """(mode, folds, mean row, ci95 row) of a protocol's CSV files."""
    out = []
    for mode in ("clean", "paper"):
        rows = read_csv(os.path.join(work, sub, "protocol_%s_pairs_%s.csv" % (protocol, mode)))
        if not rows:
            continue
        folds = sum(1 for r in rows if r["section"] == "fold")
        mean = next((r for r in rows if r["section"] == "mean"), None)
        ci = next((r for r in rows if r["section"] == "ci95"), None)
        out.append((mode, folds, mean, ci))
    return out


def xu_note(work):
    """What kace eval said about Xu et al. on this GPU's data: (ran, its line)."""
    try:
        with open(os.path.join(work, "paper.txt")) as f:
            for line in f:
                if line.startswith("(Xu et al. "):
                    return not line.startswith("(Xu et al. left out"), line.strip()[1:-1]
    except OSError:
        pass
    return True, None


def protocol_table(w, rows, what, policies=POLICIES):
    w("| mode | %s | " % what + " | ".join(policies) + " | kace error (% of exclusive) |")
    w("|---|---|" + "---|" * len(policies) + "---|")
    for mode, folds, mean, ci in rows:
        cells = []
        for p in policies:
            m, c = num(mean.get(p)) if mean else None, num(ci.get(p)) if ci else None
            cells.append("–" if m is None else ("%.3f ± %.3f" % (m, c) if c is not None else "%.3f" % m))
        err = num(mean.get("kace_mae_pct")) if mean else None
        w("| %s | %d | %s | %s |" % (mode, folds, " | ".join(cells), "–" if err is None else "%.1f" % err))


def markdown(data, work, have_data, img_rel):
    out = []
    w = out.append
    if not have_data:
        w("Not measured yet: `%s` does not exist. No GPU visit has brought back kace's own campaign; the" % data)
        w("device steps are in [gpu.md](gpu.md), and this section is written again from the data by")
        w("`tools/gpu-report.py --update docs/h100.md`.")
        return "\n".join(out)
    name = gpu_name(data) or "(GPU not recorded)"
    col = os.path.join(data, "colocations")
    n_pairs = count_rows(os.path.join(col, "pairs.csv"))
    w("Data: `%s`, measured by kace on %s: %d workloads profiled, %d pairs, %d triples at 100/100 MPS." % (
        data, name, count_rows(os.path.join(data, "profiles", "system.csv")), n_pairs,
        count_rows(os.path.join(col, "triples.csv"))))
    if n_pairs < MIN_PAIRS:
        w("Too few pairs to evaluate yet (at least %d are needed, so that each workload has candidates to choose" %
          MIN_PAIRS)
        w("from); the campaign measures them after profiling ([gpu.md](gpu.md), section 5).")
        splits_section(w, data, work, name)
        return "\n".join(out)
    xu_ran, xu_line = xu_note(work)
    here = POLICIES[:2] + ["Xu"] + POLICIES[2:] if xu_ran else POLICIES
    w("Scores are achieved / Oracle: the measured throughput sum of the partner each policy picks, over the")
    w("best measured partner's.")
    if xu_line:
        w("kace eval: %s." % xu_line)
    w("Across GPUs Xu et al. is left out: its PCIe features are NVML's here and ncu's on the V100.")
    w("")
    w("### Training size (n_occur splits made the KACE artifact's way)")
    w("")
    clean = read_csv(os.path.join(work, "paper", "summary_clean.csv"))
    paper = {r["n_occur"]: r for r in read_csv(os.path.join(work, "paper", "summary_paper.csv"))}
    w("Mean over the 5 seeds of each n_occur; clean mode, and kace and KACE in paper mode.")
    w("")
    w("| n_occur | " + " | ".join(here) + " | kace (paper mode) | KACE (paper mode) |")
    w("|---|" + "---|" * (len(here) + 2))
    for r in clean:
        p = paper.get(r["n_occur"], {})
        w("| %s | %s | %s | %s |" % (r["n_occur"], " | ".join(f3(r.get(c)) for c in here), f3(p.get("kace")),
                                     f3(p.get("KACE"))))
    w("")
    w("`nan`/– where an n_occur leaves no test rows (every pair was taken for training).")
    w("")
    w("### Unseen workload families (leave-family-out)")
    w("")
    w("Mean over folds ± the 95% t-interval half-width ([eval.md](eval.md)).")
    w("")
    protocol_table(w, protocol_rows(work, "lfo", "leave-family-out"), "folds", here)
    tri = read_csv(os.path.join(work, "paper", "triples_clean.csv"))
    tri_mean = next((r for r in tri if r["target"] == "mean"), None)
    if tri and not tri_mean:
        vals = {p: [num(r.get(p)) for r in tri if num(r.get(p)) is not None] for p in here}
        tri_mean = {p: (sum(v) / len(v) if v else None) for p, v in vals.items()}
    if tri_mean:
        w("")
        w("Triples (the paper's family-exclusion splits, clean mode, %d targets): " % len(tri) +
          ", ".join("%s %s" % (p, f3(tri_mean.get(p))) for p in here) + ".")
    w("")
    w("### Across GPUs")
    w("")
    w("Leave-workload-out with every fold fitted on the other GPU's pairs (`--train-db`): each target")
    w("here is chosen for by models that saw none of this GPU's colocations.")
    w("")
    w("V100 → %s (targets: this dataset's workloads):" % name)
    w("")
    protocol_table(w, protocol_rows(work, "v100-to-gpu", "leave-workload-out"), "targets")
    w("")
    w("%s → V100 (targets: the paper's 21 workloads):" % name)
    w("")
    protocol_table(w, protocol_rows(work, "gpu-to-v100", "leave-workload-out"), "targets")
    splits_section(w, data, work, name)
    figs = [(src, dst) for src, dst in FIGURES if os.path.exists(os.path.join(work, src))]
    if figs:
        w("")
        w("Figures (clean mode): " + ", ".join("[%s](%s/%s)" % (dst[:-4].replace("_", " "), img_rel, dst)
                                               for _, dst in figs) + ".")
    return "\n".join(out)


def main(argv):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    opts = {"--kace": os.path.join(here, "build", "kace"), "--data": "data/h100",
            "--v100": os.path.join(here, "..", "shared", "data", "kace-v100"), "--work": None, "--update": None,
            "--check": None}
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a not in opts or not args:
            die("unknown option or missing value: %s (see --help)" % a)
        opts[a] = args.pop(0)
    doc = opts["--update"] or opts["--check"]
    if opts["--update"] and opts["--check"]:
        die("--update and --check exclude each other")
    data = opts["--data"].rstrip("/")
    have_data = os.path.isdir(data)
    work = opts["--work"]
    tmp = None
    if have_data:
        if not os.access(opts["--kace"], os.X_OK):
            die("no kace binary at %s (make build, or --kace BIN)" % opts["--kace"])
        if not os.path.isdir(opts["--v100"]):
            die("no V100 data at %s (--v100 DIR)" % opts["--v100"])
        if not work:
            work = tmp = tempfile.mkdtemp(prefix="kace-gpu-report.")
        os.makedirs(work, exist_ok=True)
    try:
        if have_data and (count_rows(os.path.join(data, "colocations", "pairs.csv")) >= MIN_PAIRS or
                          has_split_grids(data)):
            evaluate(opts["--kace"], data, opts["--v100"], work)
        img_rel = "img/" + os.path.basename(data)
        text = markdown(data, work, have_data, img_rel)
        if not doc:
            print(text)
            return 0
        with open(doc) as f:
            old = f.read()
        if BEGIN not in old or END not in old[old.index(BEGIN):]:
            die("%s has no %s ... %s block" % (doc, BEGIN, END))
        i = old.index(BEGIN) + len(BEGIN)
        j = old.index(END, i)
        new = old[:i] + "\n" + text + "\n" + old[j:]
        if opts["--check"]:
            if new != old:
                print("gpu-report.py: %s differs from what %s gives; run: tools/gpu-report.py --update %s" %
                      (doc, data, doc), file=sys.stderr)
                return 1
            print("%s: up to date with %s" % (doc, data))
            return 0
        with open(doc, "w") as f:
            f.write(new)
        if have_data:
            dest = os.path.join(os.path.dirname(os.path.abspath(doc)), img_rel)
            os.makedirs(dest, exist_ok=True)
            for src, dst in FIGURES:
                if os.path.exists(os.path.join(work, src)):
                    shutil.copy(os.path.join(work, src), os.path.join(dest, dst))
        print("%s: written from %s" % (doc, data))
        return 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
