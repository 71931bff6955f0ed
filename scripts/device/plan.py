#!/usr/bin/env python3
"""Writes the device campaign's plan (format: include/kace/campaign.h) for the
workloads named on the command line, in catalog order. Deterministic: the same
names give the same plan, so every call of campaign.sh continues the same one.

  plan.py NAME...  > plan.txt

  - pairs: `occur N seed 1` (every workload in >= N pairs, N = max(5, ceil(60/n)),
    so >= 30 pairs) or, with too few workloads for that, every pair;
  - 10 triples at 100/100/100, spread evenly over the workloads;
  - 2 MPS split grids (10 30 50 70 90) on two pairs of different workloads;
  - 6 pairs measured 3 times (run-to-run spread);
  - 3 of those pairs time-sliced as well, beside their MPS measurements;
  - last, the split grids' workloads alone under MPS at 10 30 50 70 90 100%: their
    exclusive throughput at each share, the curve the split advisor and the placer read.
"""
import itertools
import sys


def main(names):
    n = len(names)
    if n < 3:
        sys.exit("plan.py: %d workloads: a campaign needs at least 3" % n)
    out = ["# written by scripts/device/plan.py from %d workloads (catalog order)" % n,
           "workloads " + " ".join(names)]
    occur = max(5, -(-60 // n))
    if occur <= n - 1 and n * (n - 1) // 2 >= 30:
        out.append("occur %d seed 1   # every workload in >= %d pairs: >= 30 pairs" % (occur, occur))
    else:
        out.append("pairs   # %d workloads: every pair (%d)" % (n, n * (n - 1) // 2))
    # Triples: the least used workloads first, ties in catalog order, no triple twice.
    use = [0] * n
    chosen = set()
    triples = []
    all_triples = list(itertools.combinations(range(n), 3))
    for _ in range(min(10, len(all_triples))):
        best = min((t for t in all_triples if t not in chosen), key=lambda t: (sum(use[i] for i in t), t))
        chosen.add(best)
        triples.append(best)
        for i in best:
            use[i] += 1
    for t in triples:
        out.append("run " + " ".join(names[i] for i in t))
    # Split grids on two disjoint pairs: the first two workloads, and the last two.
    out.append("splits 10 30 50 70 90 on %s %s" % (names[0], names[1]))
    out.append("splits 10 30 50 70 90 on %s %s" % (names[n - 2], names[n - 1]))
    # Spread: 6 pairs, 3 repetitions each (repetition 0 may coincide with an occur pair).
    rep = []
    for i in range(6):
        a, b = i % n, (i + 1 + i // n) % n
        if a == b:
            b = (b + 1) % n
        rep.append((names[a], names[b]))
    out.append("repeat 3   # run-to-run spread")
    out += ["run %s %s" % p for p in rep]
    out.append("repeat 1")
    out.append("mode timeslice   # the same pairs without MPS, to compare")
    out += ["run %s %s" % p for p in rep[:3]]
    out.append("mode mps   # each grid workload alone at a share: its exclusive-throughput curve")
    grid = [names[0], names[1]] + [x for x in (names[n - 2], names[n - 1]) if x not in (names[0], names[1])]
    out += ["run %s @ %d" % (w, p) for w in grid for p in (10, 30, 50, 70, 90, 100)]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
