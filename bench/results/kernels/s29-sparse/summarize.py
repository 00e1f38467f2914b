#!/usr/bin/env python3
"""Tables of s29-sparse's runs: per cell, TFLOP/s and per pair x dense (vs_dense, the
process's own dense line) of base / new (one process each) and the in-process A/B knob sets."""
import collections
import json
import sys

for f in sys.argv[1:]:
    R = collections.defaultdict(lambda: collections.defaultdict(list))
    for l in open(f):
        if not l.startswith("{"):
            continue
        r = json.loads(l)
        if r["kernel"] == "index_stats":
            continue
        key = (r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"],
               r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
        R[key][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
    tags = sorted({t for v in R.values() for t in v})
    print("#", f)
    print("| len | bm | index | " + " | ".join(tags) + " | new / base | ab b160 / b128 |")
    print("|" + " --- |" * (len(tags) + 5))
    for k in sorted(R):
        v = R[k]
        cells = []
        for t in tags:
            xs = v.get(t, [])
            cells.append(" ".join("%.0f (%.2f)" % x for x in xs) if xs else "")
        nb = "%.3f" % (v["new"][0][0] / v["base"][0][0]) if v.get("new") and v.get("base") else ""
        ab = ""
        if v.get("ab/b160") and v.get("ab/b128"):
            a = sum(x[0] for x in v["ab/b160"]) / len(v["ab/b160"])
            b = sum(x[0] for x in v["ab/b128"]) / len(v["ab/b128"])
            ab = "%.3f" % (a / b)
        print("| %dK | %s | %s %.3f | %s | %s | %s |" % (k[0] // 1024, k[1] or "-", k[2], k[3],
                                                        " | ".join(cells), nb, ab))
