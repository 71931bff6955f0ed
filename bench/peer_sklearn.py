#!/usr/bin/python3
"""Speed peer for `kace eval`: the same evaluation written as a Python user would,
with pandas, numpy and scikit-learn (Debian's python3-sklearn; no PyPI).

Protocol: docs in ../shared/docs/kace-protocol.md (sections 2-7).
Prints, per mode and n_occur, the mean over seeds of the mean over targets of each
policy's normalized throughput sum, the MSE/R^2 of the predicted z-label over the test
set, the unseen-family mean and the triples mean, then `peer_seconds=<float>`: the
wall time of the whole evaluation (data loading included), excluding interpreter
start-up and imports.  `--with-xu` additionally runs the Xu et al. random-forest
baseline (n_occur=3, paper mode) and reports its score and time separately.
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import RandomizedSearchCV
from sklearn.preprocessing import StandardScaler

KERNEL = ["Threads", "Compute (SM) Throughput", "DRAM Throughput",
          "Memory Throughput", "Registers", "Static Shared Memory"]
SYSTEM = ["exclusive_throughput", "sm%", "mem%", "memcap"]
XU_KERNEL = ["PCIe read bandwidth", "PCIe write bandwidth", "Long_Kernel",
             "ave_Kernel_Length", "long/short_Ratio", "avg_Thread"]
XU_SYSTEM = ["sm%", "mem%", "CPU%", "MainMem%"]
FEATURES = KERNEL + SYSTEM
XU_FEATURES = XU_KERNEL + XU_SYSTEM
RULES = ["Random", "MEMCAP", "SM%", "MEM%"]
POLICIES = ["KACE", "Best rule"] + RULES


# ---------------------------------------------------------------- data
def colocation_features(df, k, kernel, system):
    """Section 2: sum each feature over the k workloads, average the '%' ones."""
    out = pd.DataFrame(index=df.index)
    for f in kernel + system:
        cols = [f"w{i}_{f}" if f in kernel else f"w{i}{f}" for i in range(1, k + 1)]
        s = df[cols].sum(axis=1)
        out[f] = s / k if "%" in f else s
    out["label"] = df[[f"w{i}throughput" for i in range(1, k + 1)]].sum(axis=1)
    out["workloads"] = list(zip(*(df[f"workload{i}"] for i in range(1, k + 1))))
    return out


def family(workload):
    """model + mode: 'bert-base-cased_batch8-inf' -> 'bert-base-cased-inf'."""
    return re.sub(r"_batch\d+", "", workload)


# ---------------------------------------------------------------- model
def fit_scaler(X):
    """StandardScaler with the protocol's sample std (ddof=1)."""
    sc = StandardScaler().fit(X)
    if len(X) > 1:
        std = np.asarray(X, dtype=float).std(axis=0, ddof=1)
        sc.scale_ = np.where(std > 0, std, 1.0)
    return sc


def zscore_own(X):
    """Paper mode: z-score a candidate set with its own statistics (1 row -> 0)."""
    if len(X) < 2:
        return np.zeros(X.shape)
    return fit_scaler(X).transform(X)


class Model:
    """z-scored features and label, then a regressor (linear by default)."""

    def __init__(self, rows, features, regressor=None):
        self.features = features
        X = rows[features].to_numpy()
        y = rows[["label"]].to_numpy()
        self.xs, self.ys = fit_scaler(X), fit_scaler(y)
        self.reg = regressor if regressor is not None else LinearRegression()
        self.reg.fit(self.xs.transform(X), self.ys.transform(y).ravel())

    def predict(self, rows, own_stats):
        X = rows[self.features].to_numpy()
        Z = zscore_own(X) if own_stats else self.xs.transform(X)
        return self.reg.predict(Z)

    def z_label(self, rows, own_stats):
        y = rows[["label"]].to_numpy()
        return (zscore_own(y) if own_stats else self.ys.transform(y)).ravel()


# ---------------------------------------------------------------- choosing
def choose(model, cands, own_stats, with_rules=True):
    """Section 4: normalized sums for one target's candidate set."""
    y = cands["label"].to_numpy()
    best = y.max()
    if len(cands) == 1:
        return dict.fromkeys(POLICIES, 1.0)
    r = {"KACE": y[np.argmax(model.predict(cands, own_stats))] / best}
    if with_rules:
        r["Random"] = y.mean() / best
        r["MEMCAP"] = y[np.argmin(cands["memcap"].to_numpy())] / best
        r["SM%"] = y[np.argmax(cands["sm%"].to_numpy())] / best
        r["MEM%"] = y[np.argmin(cands["mem%"].to_numpy())] / best
        r["Best rule"] = max(r[p] for p in RULES)
    return r


def contains(rows, w):
    return rows["workloads"].map(lambda ws: w in ws)


def split_eval(train, test, targets, mode, features=FEATURES, regressor=None):
    """One (n_occur, seed): per-target scores averaged over targets, plus MSE/R^2."""
    paper = mode == "paper"
    fit_rows = train[train["paper_fit"] == 1] if paper else train
    model = Model(fit_rows, features, regressor)
    scores = []
    for w in targets:
        cands = test[contains(test, w)]
        if len(cands):
            scores.append(choose(model, cands, paper, regressor is None))
    res = pd.DataFrame(scores).mean().to_dict()
    zt = model.z_label(test, paper)
    zp = model.predict(test, paper)
    res["MSE"] = mean_squared_error(zt, zp)
    res["R2"] = r2_score(zt, zp)
    return res


def family_exclusion(rows, targets, mode):
    """Sections 6/7: per target, train on rows with no workload of its family."""
    paper = mode == "paper"
    fams = rows["workloads"].map(lambda ws: {family(w) for w in ws})
    scores = []
    for w in targets:
        train = rows[~fams.map(lambda fs: family(w) in fs)]
        cands = rows[contains(rows, w)]
        if len(cands):
            scores.append(choose(Model(train, FEATURES), cands, paper, False)["KACE"])
    return float(np.mean(scores))


# ---------------------------------------------------------------- main
def load(data):
    col = os.path.join(data, "colocations")
    pairs = colocation_features(pd.read_csv(os.path.join(col, "pairs.csv")), 2,
                                KERNEL, SYSTEM)
    triples = colocation_features(pd.read_csv(os.path.join(col, "triples.csv")), 3,
                                  KERNEL, SYSTEM)
    splits = pd.read_csv(os.path.join(data, "splits.csv"))
    return pairs, triples, splits


def join_split(splits, rows):
    """Rows of one split in splits.csv order, with its paper_fit flag."""
    keyed = rows.assign(workload1=rows["workloads"].str[0],
                        workload2=rows["workloads"].str[1])
    return splits.merge(keyed, on=["workload1", "workload2"], how="left",
                        validate="many_to_one")


def evaluate(data, modes):
    pairs, triples, splits = load(data)
    targets = sorted({w for ws in pairs["workloads"] for w in ws})
    t_targets = sorted({w for ws in triples["workloads"] for w in ws})
    results = {}
    for mode in modes:
        per_split = []
        for (n, seed), sp in splits.groupby(["n_occur", "seed"], sort=True):
            rows = join_split(sp, pairs)
            r = split_eval(rows[rows["set"] == "train"], rows[rows["set"] == "test"],
                           targets, mode)
            per_split.append(dict(n_occur=n, seed=seed, **r))
        table = pd.DataFrame(per_split).groupby("n_occur")[
            POLICIES + ["MSE", "R2"]].mean()
        unseen = family_exclusion(pairs, targets, mode)
        trip = family_exclusion(triples, t_targets, mode)
        results[mode] = (table, unseen, trip)
    return results


def run_xu(data, n_iter, n_occur=3):
    col = os.path.join(data, "colocations")
    xu = colocation_features(pd.read_csv(os.path.join(col, "pairs-xu.csv")), 2,
                             XU_KERNEL, XU_SYSTEM)
    splits = pd.read_csv(os.path.join(data, "splits.csv"))
    targets = sorted({w for ws in xu["workloads"] for w in ws})
    grid = {
        "n_estimators": [int(x) for x in np.linspace(200, 2000, 10)],
        "max_features": ["sqrt", "log2"],
        "max_depth": [int(x) for x in np.linspace(10, 110, 11)] + [None],
        "min_samples_split": [2, 5, 10],
        "min_samples_leaf": [1, 2, 4],
        "bootstrap": [True, False],
    }
    scores = []
    for seed, sp in splits[splits["n_occur"] == n_occur].groupby("seed"):
        rows = join_split(sp, xu)
        search = RandomizedSearchCV(RandomForestRegressor(random_state=seed), grid,
                                    n_iter=n_iter, cv=5, random_state=seed, n_jobs=-1)
        r = split_eval(rows[rows["set"] == "train"], rows[rows["set"] == "test"],
                       targets, "paper", XU_FEATURES, search)
        scores.append(r["KACE"])
    return float(np.mean(scores))


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(repo, "..", "shared", "data",
                                                   "kace-v100"))
    ap.add_argument("--modes", default="paper,clean")
    ap.add_argument("--with-xu", action="store_true")
    ap.add_argument("--xu-iter", type=int, default=10)
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("paper", "clean") for m in modes):
        ap.error("--modes: comma-separated list of paper, clean")

    t0 = time.perf_counter()
    results = evaluate(args.data, modes)
    elapsed = time.perf_counter() - t0

    cols = POLICIES + ["MSE", "R2"]
    for mode, (table, unseen, trip) in results.items():
        print(f"mode={mode}")
        print("n_occur " + " ".join(f"{c:>9}" for c in cols))
        for n, row in table.iterrows():
            print(f"{n:7d} " + " ".join(f"{row[c]:9.3f}" for c in cols))
        print(f"unseen {unseen:.3f}")
        print(f"triples {trip:.3f}")
    print(f"peer_seconds={elapsed:.6f}")

    if args.with_xu:
        t0 = time.perf_counter()
        score = run_xu(args.data, args.xu_iter)
        print(f"xu n_occur=3 paper {score:.3f}")
        print(f"xu_seconds={time.perf_counter() - t0:.6f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
