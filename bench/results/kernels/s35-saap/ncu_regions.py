#!/usr/bin/env python3
"""Stall samples of one kernel's SASS by region: `ncu --import REP --page source --print-source sass
--csv > sass.csv`, then `ncu_regions.py sass.csv`. A region is a run of instructions with the same
execution count (a loop body or a phase); regions under 0.4 % of the samples are left out."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
def f(r, k):
    try:
        return float(r[ix[k]].replace(",", ""))
    except (ValueError, KeyError):
        return 0.0
S = "Warp Stall Sampling (All Samples)"
stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(f(r, S) for r in data)
print(f"{len(data)} instructions, {tot:.0f} samples")
for s, v in sorted(((s, sum(f(r, s) for r in data)) for s in stalls), key=lambda x: -x[1])[:8]:
    print(f"  {s:24s} {100 * v / tot:5.1f} %")
segs = []
for i, r in enumerate(data):
    e = f(r, "Instructions Executed")
    if segs and segs[-1][2] == e:
        segs[-1][1] = i
    else:
        segs.append([i, i, e])
for a, b, e in segs:
    s = sum(f(data[k], S) for k in range(a, b + 1))
    if s < 0.004 * tot:
        continue
    agg = sorted(((sum(f(data[k], x) for k in range(a, b + 1)), x) for x in stalls), reverse=True)[:3]
    ops = sorted({(data[k][1].split()[1] if data[k][1].startswith("@") else data[k][1].split()[0])
                  for k in range(a, b + 1)})
    print(f"{a:5d}-{b:5d} exec {e:9.0f} {100 * s / tot:5.1f} %  "
          + " ".join(f"{x[6:]} {100 * v / tot:.1f}" for v, x in agg) + "  | " + " ".join(ops)[:90])
