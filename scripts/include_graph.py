"""The include graph of src/ against the layers (docs/architecture.md): each file belongs to one
layer, and no include runs from a lower layer into a higher one. Within a layer, no include runs
back up either: the units (a header and its source, e.g. exec/exec.h and exec/exec.cpp) include
one another without a cycle, so that what a folder's lower pieces need (an options struct) lives
below the orchestration that uses them, not in its header. (That no family includes another is
AddingAFamily.NoFamilyIncludesAnother's.)

The layers, bottom to top, are CMakeLists.txt's FCA_LAYERS, then cli (the program). A file's layer
is its folder under src/, except that everything in a family folder, src/models/<family>/ (every
folder of src/models but base/ and external/), is in the layer model_families, its train/ and
exec/ sub-folders included.

  include_graph.py [--root DIR]           print the arrows between layers, with a count each
  include_graph.py --check [--root DIR]   exit 1 on an include that runs up the layers, or on a
                                          cycle of units

The test SourceShape.NoIncludeRunsUpTheLayers (tests/source_shape_test.cpp) runs --check.
"""
import argparse
import collections
import os
import re
import sys

SHARED_MODEL_FOLDERS = ("base", "external")


def layers(root):
    text = open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"set\(FCA_LAYERS ([^)]*)\)", text)
    if not m:
        sys.exit(f"{root}/CMakeLists.txt: no set(FCA_LAYERS ...)")
    return m.group(1).split() + ["cli"]


def layer_of(rel, root):
    """The layer of a path relative to src/."""
    parts = rel.split("/")
    if parts[0] == "models" and len(parts) > 2 and parts[1] not in SHARED_MODEL_FOLDERS and \
            os.path.isdir(os.path.join(root, "src", "models", parts[1])):
        return "model_families"
    return parts[0]


def arrows(root):
    """(file, included file, file's layer, included file's layer) of every include of src/."""
    src = os.path.join(root, "src")
    out = []
    for folder, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp")):
                continue
            path = os.path.join(folder, f)
            rel = os.path.relpath(path, src)
            for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', open(path, encoding="utf-8").read(), re.M):
                target = m.group(1)
                if not os.path.exists(os.path.join(src, target)):
                    continue  # a system, generated or same-folder header outside src/'s roots
                out.append((rel, target, layer_of(rel, root), layer_of(target, root)))
    return out


def unit_cycles(graph):
    """The include cycles between units (a path without its extension), one per strongly connected
    set of units, each as a closed path [u0, u1, ..., u0]."""
    unit = lambda path: os.path.splitext(path)[0]
    edges = collections.defaultdict(set)
    for rel, target, _, _ in graph:
        if unit(rel) != unit(target):
            edges[unit(rel)].add(unit(target))
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):  # Tarjan's algorithm (recursion depth: the longest include chain)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in sorted(set(edges)):
        if v not in index:
            strong(v)
    cycles = []
    for comp in sccs:  # a shortest way back to the first unit, by breadth-first search inside the set
        start = min(comp)
        previous, frontier = {start: None}, [start]
        while frontier and start not in [w for v in frontier for w in edges[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(edges[v] & comp):
                    if w not in previous:
                        previous[w] = v
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in edges[v])
        path = [last]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        cycles.append(list(reversed(path)) + [start])
    return cycles


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    order = layers(a.root)
    rank = {name: i for i, name in enumerate(order)}
    graph = arrows(a.root)
    bad = []
    for rel, target, la, lb in graph:
        if la not in rank or lb not in rank:
            bad.append(f"src/{rel}: includes {target}: folder {la if la not in rank else lb} is in no layer "
                       f"(layers: {' '.join(order)})")
        elif rank[lb] > rank[la]:
            bad.append(f"src/{rel}: includes {target}, which runs up from layer {la} to layer {lb}")
    for cycle in unit_cycles(graph):
        bad.append("include cycle between units: " + " -> ".join(cycle) +
                   " (an include runs back up inside a layer: move what the lower unit needs into a header of its own)")
    if not a.check:
        counts = collections.Counter((la, lb) for _, _, la, lb in graph if la != lb)
        for (la, lb), n in sorted(counts.items(), key=lambda x: (rank.get(x[0][0], -1), rank.get(x[0][1], -1))):
            print(f"{la:15s} -> {lb:15s} {n}")
    for line in bad:
        print(line)
    print(f"{len(graph)} includes over {len(order)} layers: {'ok' if not bad else f'{len(bad)} FAILED'}")
    return 1 if bad and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
