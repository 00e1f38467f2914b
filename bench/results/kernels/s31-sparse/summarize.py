#!/usr/bin/env python3
"""s31-sparse run 1: TFLOP/s (per pair x dense) per cell and knob set (auto / k2 / k3 / v3: one process,
2 interleaved rounds; ratios by summed median ms over the rounds, and by min ms) and base / new
(one process each); the index's mean packed tiles per row (128 keys) from its index_stats line."""
import json, sys, collections
path = sys.argv[1] if len(sys.argv) > 1 else "run1/bench.jsonl"
R = collections.defaultdict(lambda: collections.defaultdict(list))
stats = {}
for l in open(path):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats":
        stats[(r["seq_len"], r["block_m"], r["index"])] = r
        continue
    k = (r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"],
         r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
    R[k][r["tag"].split("/")[-1]].append(r)
def mean(xs): return sum(xs) / len(xs)
print("| len | bm | index | tiles/row | auto | k2 (= e30e6a9 ring) | k3 | v3 | auto/k2 | k3/k2 | v3/k2 | auto/k2 (min) | base | new | new/base |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k in sorted(R):
    t = R[k]
    if k[1] == 0: continue
    def cell(tag):
        if tag not in t: return ""
        return " / ".join("%.0f (%.2f)" % (r["tflops"], r.get("vs_dense", 0)) for r in t[tag])
    def ratio(a, b, f):  # speed of b over a (ms of a / ms of b)
        if a not in t or b not in t: return ""
        return "%.3f" % (mean([f(r) for r in t[a]]) / mean([f(r) for r in t[b]]))
    name = k[2]
    st = None
    for (sl, bm, ix), s in stats.items():
        if sl == k[0] and bm == k[1] and (ix == name or (name == "dense_index" and ix == "dense_index")) and (ix != "ranges" or abs(s.get("density", -1) - k[3]) < 2e-3 or True):
            st = s
    tiles = ""
    print("| %dK | %s | %s %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        k[0] // 1024, k[1], name, k[3], tiles, cell("auto"), cell("k2"), cell("k3"), cell("v3"),
        ratio("k2", "auto", lambda r: r["ms"]), ratio("k2", "k3", lambda r: r["ms"]),
        ratio("k2", "v3", lambda r: r["ms"]), ratio("k2", "auto", lambda r: r["ms_min"]),
        cell("base"), cell("new"), ratio("base", "new", lambda r: r["ms"])))
print()
for k in sorted(R):
    if k[1] == 0:
        print("dense", k[0], {t: [round(r["tflops"]) for r in v] for t, v in R[k].items()})
