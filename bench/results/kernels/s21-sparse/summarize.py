"""Summary of an s21-sparse device run directory: cuda_bench cells per build and knob set, and the
key ncu numbers per profiled launch (s20-sparse's summary, the references left out)."""
import json
import os
import re
import sys
from collections import defaultdict

out = sys.argv[1]


def lines(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    res = []
    for l in open(path):
        l = l.strip()
        if l.startswith("{"):
            try:
                res.append(json.loads(l))
            except ValueError:
                pass
    return res


rows = defaultdict(lambda: defaultdict(list))
for r in lines("bench.jsonl"):
    if "kernel" not in r or r["kernel"] == "index_stats":
        continue
    dense = r["kernel"].startswith("dense")
    k = (r["seq_len"], 0 if dense else r.get("block_m", 0),
         r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
    rows[k][r["tag"]].append("%.0f(%s)" % (r["tflops"], r.get("vs_dense", r.get("vs_sdpa", "-"))))
for k in sorted(rows):
    print(k, " | ".join("%s %s" % (t, " ".join(v)) for t, v in sorted(rows[k].items())))
for r in lines("spattn_bench.jsonl"):
    print(r.get("method"), r.get("seq_len"), "build %.2f kernel %.2f dens %.4f recall %.3f tf %.1f" % (
        r.get("index_build_ms", 0), r.get("kernel_ms", 0), r.get("density", 0), r.get("recall", 0),
        r.get("tflops", 0)))
for r in lines("refs.jsonl") + lines("sdpa.jsonl"):
    print(json.dumps(r))
# ncu: per launch, the name line and a few metrics.
path = os.path.join(out, "ncu.txt")
if os.path.exists(path):
    keys = ("Duration", "Elapsed Cycles", "SM Active Cycles", "Compute (SM) Throughput",
            "Memory Throughput", "L2 Cache Throughput", "DRAM Throughput", "Issue Slots Busy",
            "Executed Ipc Active", "No Eligible", "Warp Cycles Per Issued Instruction",
            "sm__cycles_active.min", "sm__cycles_active.max", "sm__cycles_active.avg",
            "lts__t_sector_hit_rate.pct", "Grid Size", "Waves Per SM", "smsp__average_warps_issue_stalled")
    for l in open(path):
        if re.search(r"Fa3Kernel.*\(\d+, \d+, \d+\)x\(", l):
            print("==", l.strip()[:160])
        else:
            s = l.strip()
            for k in keys:
                if s.startswith(k):
                    print("   ", re.sub(r"\s+", " ", s))
                    break
