#!/usr/bin/env python3
"""Writes the device campaign's plan (format: include/kace/campaign.h) for the
workloads named on the command line, in catalog order. Deterministic: the same
names give the same plan, so every call of campaign.sh continues the same one.

  plan.py NAME...  > plan.txt
  plan.py --extend OLD_PLAN NAME...  > plan.txt


  - pairs: `occur N seed 1` (every workload in >= N pairs, N = max(5, ceil(60/n)),
    so >= 30 pairs) or, with too few workloads for that, every pair;
  - 10 triples at 100/100/100, spread evenly over the workloads;
  - 2 MPS split grids (10 30 50 70 90) on two pairs of different workloads;
  - 6 pairs measured 3 times (run-to-run spread);
  - 3 of those pairs time-sliced as well, beside their MPS measurements;
  - last, the split grids' workloads alone under MPS at 10 30 50 70 90 100%: their
    exclusive throughput at each share, the curve the split advisor and the placer read.

--extend: a workload added to the catalog after the plan was made joins it.
OLD_PLAN's text is kept as it is, so every run it planned keeps its place and
what is measured stays measured; the NAMEs it does not hold are added, each in
>= N pairs (N: OLD_PLAN's `occur N`, else 5; every other NAME when fewer).
Partners are the NAMEs with the fewest pairs added so far, by this extension
or an earlier one, ties in catalog order, so added workloads pair with each
other too, and workloads added one call at a time do not all pair with the
same ones. Triples, split grids,
repetitions and curves stay the first plan's. With nothing to add, OLD_PLAN
is printed unchanged.
"""
import itertools
import sys


def statements(text):
    """(line number, words) of each statement of a plan's text."""
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words:
            yield number, words


def extend(old_path, names):
    try:
        with open(old_path) as f:
            old = f.read()
    except OSError as e:
        sys.exit("plan.py: %s: %s" % (old_path, e.strerror))
    planned, occur, explicit, sections = set(), 5, [], 0
    for number, words in statements(old):
        if words[0] == "workloads":
            planned.update(words[1:])
            sections += 1
        elif words[0] == "occur" and len(words) >= 2 and words[1].isdigit():
            occur = int(words[1])
        elif words[0] == "run" and len(words) == 3 and "@" not in words and sections > 1:
            explicit.append(words[1:])
        elif words[0] == "set":
            # Appended runs would go into that set instead of "pairs".
            sys.exit("plan.py: %s:%d: 'set' changes where later runs are stored: extend this plan by hand"
                     % (old_path, number))
    if not planned:
        sys.exit("plan.py: %s: no 'workloads' statement: not a plan to extend" % old_path)
    added = [x for x in names if x not in planned]
    if not added:
        sys.stdout.write(old)
        return
    need = min(occur, len(names) - 1)
    # An earlier extension's pairs count, so workloads added one call at a time do not all
    # pair with the first names in the catalog.
    count = {x: 0 for x in names}
    for pair in explicit:
        for x in pair:
            if x in count:
                count[x] += 1
    paired = set()
    runs = []
    for w in added:
        while count[w] < need:
            partner = min((x for x in names if x != w and frozenset((w, x)) not in paired),
                          key=lambda x: (count[x], names.index(x)))
            paired.add(frozenset((w, partner)))
            count[w] += 1
            count[partner] += 1
            runs.append("run %s %s" % (w, partner))
    out = [old.rstrip("\n"),
           "# extended by scripts/device/plan.py: %d workload%s profiled after the plan was made, each in >= %d pairs"
           % (len(added), "" if len(added) == 1 else "s", need),
           "workloads " + " ".join(added),
           "repeat 1",
           "mode mps"] + runs
    print("\n".join(out))


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
    args = sys.argv[1:]
    if args[:1] == ["--extend"]:
        if len(args) < 3:
            sys.exit("usage: plan.py --extend OLD_PLAN NAME...")
        extend(args[1], args[2:])
    else:
        main(args)
