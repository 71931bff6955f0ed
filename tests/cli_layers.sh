#!/usr/bin/env bash
# The library's layers (docs/architecture.md). A file's layer is its folder:
# lib/<layer>/, with the layers ordered below (lowest first); a public header
# include/kace/X.h is in the layer of the source that implements it,
# lib/<layer>/X.c, or lib/<layer>/X_<part>.c for a module split into files
# (kace.h, the error context, is base). Fails when
#   - an #include "..." in lib/ or include/kace/ points to a higher layer;
#   - headers include each other in a cycle;
#   - two modules include each other's internal headers, directly or through
#     others (a module is lib/<layer>/X.c with its internal headers X.h and
#     X_internal.h: "forest.c includes model_internal.h, model.c includes
#     forest.h" is a cycle even though no header includes itself);
#   - a file has no layer (a folder not in the list, a public header without
#     a source, a .c or .h directly in lib/).
#   bash cli_layers.sh [KACE_BIN SHARED_DIR SCRATCH_DIR]   (arguments unused)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$root" <<'PY'
import os, re, sys
root = sys.argv[1]
# Lowest first; a file may include its own layer and those below.
layers = ["base", "gpu", "data", "model", "store", "measure", "decide", "service"]
rank = {name: i for i, name in enumerate(layers)}
problems = []

sources = []
for dirpath, _, names in os.walk(os.path.join(root, "lib")):
    for name in names:
        if name.endswith((".c", ".h")):
            sources.append(os.path.relpath(os.path.join(dirpath, name), root))
public = ["include/kace/" + n for n in os.listdir(os.path.join(root, "include/kace")) if n.endswith(".h")]
sources = sorted(sources) + sorted(public)

impl = {}  # stem -> layer of lib/<layer>/<stem>.c
split = {}  # X -> layer of lib/<layer>/X_<part>.c: a module split into files
for f in sources:
    parts = f.split("/")
    if parts[0] == "lib" and len(parts) == 3 and f.endswith(".c"):
        stem = os.path.splitext(parts[2])[0]
        impl[stem] = parts[1]
        if "_" in stem:
            split.setdefault(stem.split("_")[0], parts[1])
for stem, layer in split.items():
    impl.setdefault(stem, layer)
layer_of = {}
for f in sources:
    parts = f.split("/")
    if parts[0] == "lib":
        if len(parts) != 3 or parts[1] not in rank:
            problems.append(f"{f}: not in a layer folder lib/<layer>/ ({', '.join(layers)})")
            continue
        layer_of[f] = rank[parts[1]]
    else:
        stem = os.path.splitext(parts[-1])[0]
        if stem == "kace":
            layer_of[f] = rank["base"]
        elif stem in impl:
            layer_of[f] = rank[impl[stem]]
        else:
            problems.append(f"{f}: no lib/<layer>/{stem}.c implements it, so it has no layer")

def module_of(f):
    """lib/<layer>/X.c, X.h and X_internal.h are module X; public headers are none."""
    if not f.startswith("lib/"):
        return None
    stem = os.path.splitext(os.path.basename(f))[0]
    return stem[:-len("_internal")] if stem.endswith("_internal") else stem

def resolve(src, inc):
    cands = ["include/" + inc] if inc.startswith("kace/") else []
    cands += [os.path.normpath(os.path.join(os.path.dirname(src), inc)), os.path.normpath("lib/" + inc)]
    for path in cands:
        if os.path.exists(os.path.join(root, path)):
            return path
    return None

graph, modules = {}, {}
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
            problems.append(f"{f}:{n}: includes {m.group(1)} ({layers[layer_of[target]]}) from the "
                            f"{layers[layer_of[f]]} layer, which is below it")
        a, b = module_of(f), module_of(target)
        if a and b and a != b:
            modules.setdefault(a, {}).setdefault(b, f"{f}:{n} includes {m.group(1)}")

def find_cycle(start, edges, follow):
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, []):
            if nxt == start:
                return path + [nxt]
            if follow(nxt) and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None

# Header cycles: a header that reaches itself through includes.
for h in (s for s in sources if s.endswith(".h")):
    c = find_cycle(h, graph, lambda x: x.endswith(".h"))
    if c:
        problems.append("include cycle: " + " -> ".join(c))
# Module cycles: each reported once, from its alphabetically first module.
reported = set()
for mod in sorted(modules):
    c = find_cycle(mod, modules, lambda x: True)
    if c and frozenset(c) not in reported and min(c) == mod:
        reported.add(frozenset(c))
        why = "; ".join(modules[a][b] for a, b in zip(c, c[1:]))
        problems.append("module cycle: " + " -> ".join(c) + f" ({why})")

for p in problems:
    print("FAIL:", p)
if problems:
    sys.exit(1)
print(f"cli_layers: {len(sources)} files in {len(layers)} layers, every include points down, "
      f"no header cycle, no module cycle")
PY
