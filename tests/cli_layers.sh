#!/usr/bin/env bash
# The library's layers (docs/architecture.md): every #include "..." in lib/,
# gpu/ and include/kace/ must point to the same layer or one below, and the
# headers must not include each other in a cycle. A file missing from the
# map below fails too, so that a new file gets a layer.
#   bash cli_layers.sh [KACE_BIN SHARED_DIR SCRATCH_DIR]   (arguments unused)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$root" <<'PY'
import os, re, sys
root = sys.argv[1]
layers = [  # lowest first; a file may include its own layer and those below
    ("base", "lib/context.c lib/csv.c lib/csv.h lib/text_buf.c lib/text_buf.h lib/weighted_mean.h lib/progress.c "
             "include/kace/kace.h include/kace/progress.h"),
    ("gpu", "gpu/nvml.c gpu/runner.c lib/mps.c include/kace/nvml.h include/kace/runner.h include/kace/mps.h"),
    ("data", "lib/dataset.c lib/import.c lib/import_internal.h lib/ncu.c lib/kernels.c lib/trace.c "
             "include/kace/dataset.h include/kace/import.h include/kace/kernels.h include/kace/trace.h"),
    ("model", "lib/features.c lib/model.c lib/model_internal.h lib/fit.c lib/forest.c lib/boost.c lib/slowdown.c "
              "lib/predictor.c include/kace/model.h include/kace/predictor.h"),
    ("store", "lib/store.c include/kace/store.h"),
    ("measure", "lib/measure.c lib/campaign.c include/kace/measure.h include/kace/campaign.h"),
    ("decide", "lib/policy.c lib/group.c lib/place.c lib/sched.c lib/sim.c lib/eval.c lib/split.c "
               "include/kace/policy.h include/kace/group.h include/kace/place.h include/kace/sched.h "
               "include/kace/sim.h include/kace/eval.h include/kace/split.h"),
    ("service", "lib/serve.c lib/serve_k8s.c lib/serve_metrics.c lib/serve_internal.h include/kace/serve.h"),
]
layer_of = {}
for i, (_, files) in enumerate(layers):
    for f in files.split():
        layer_of[f] = i
problems = []
sources = []
for d in ("lib", "gpu", "include/kace"):
    for name in sorted(os.listdir(os.path.join(root, d))):
        if name.endswith((".c", ".h")):
            sources.append(f"{d}/{name}")
for f in sources:
    if f not in layer_of:
        problems.append(f"{f}: not in the layer map of tests/cli_layers.sh (give it a layer)")
def resolve(src, inc):
    for cand in (inc if inc.startswith("kace/") else None, os.path.join(os.path.dirname(src), inc)):
        if not cand:
            continue
        path = "include/" + cand if cand.startswith("kace/") else os.path.normpath(cand)
        if os.path.exists(os.path.join(root, path)):
            return path
    return None
graph = {}
for f in sources:
    text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        target = resolve(f, m.group(1))
        if not target or target not in layer_of or f not in layer_of:
            continue
        graph.setdefault(f, []).append(target)
        if layer_of[target] > layer_of[f]:
            problems.append(f"{f}:{n}: includes {m.group(1)} ({layers[layer_of[target]][0]}) from the "
                            f"{layers[layer_of[f]][0]} layer, which is below it")
# Header cycles: a header that reaches itself through includes.
def cycle_from(start):
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, []):
            if nxt == start:
                return path + [nxt]
            if nxt.endswith(".h") and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None
for h in (s for s in sources if s.endswith(".h")):
    c = cycle_from(h)
    if c:
        problems.append("include cycle: " + " -> ".join(c))
for p in problems:
    print("FAIL:", p)
if problems:
    sys.exit(1)
print(f"cli_layers: {len(sources)} files in {len(layers)} layers, every include points down, no header cycle")
PY
