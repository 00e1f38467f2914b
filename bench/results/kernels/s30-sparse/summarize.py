#!/usr/bin/env python3
"""s30-sparse run 2: TFLOP/s (per pair x dense) per cell and tag; lw1/lw0 (one process, mean of the
rounds, by median ms and by min ms) and new/base (one process each)."""
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1] if len(sys.argv) > 1 else "run2/bench.jsonl"):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    k = (r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"],
         r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
    R[k][r["tag"].split("/")[-1] if "/" in r["tag"] else r["tag"]].append(r)
def mean(xs): return sum(xs) / len(xs)
print("| len | bm | index | lw1 TFLOP/s (x dense) | lw0 | lw1/lw0 median | lw1/lw0 min | base | new | new/base |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k in sorted(R):
    t = R[k]
    def cell(tag):
        if tag not in t: return ""
        return " / ".join("%.0f (%.2f)" % (r["tflops"], r.get("vs_dense", 0)) for r in t[tag])
    def ratio(a, b, f):
        if a not in t or b not in t: return ""
        return "%.3f" % (mean([f(r) for r in t[b]]) / mean([f(r) for r in t[a]]))
    print("| %dK | %s | %s %.3f | %s | %s | %s | %s | %s | %s | %s |" % (
        k[0] // 1024, k[1] or "-", k[2], k[3], cell("lw1"), cell("lw0"),
        ratio("lw1", "lw0", lambda r: r["ms"]), ratio("lw1", "lw0", lambda r: r["ms_min"]),
        cell("base"), cell("new"), ratio("new", "base", lambda r: r["ms"])))
