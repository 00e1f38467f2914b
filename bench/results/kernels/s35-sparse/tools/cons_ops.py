# Consumer-warp instructions by opcode per 64 rows x 128 keys (one warp's share: 16 rows), from
# an ncu source CSV: two block_m 64 tiles or half a block_m 128 tile.
# usage: cons_ops.py sass.csv keys_per_tile [sass.csv keys ...]
import sys, collections, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../s30-sparse/tools"))
from parse import sections, num
res = []
a = sys.argv[1:]
for i in range(0, len(a), 2):
    fn, kpt = a[i], float(a[i + 1])
    s = sections(fn)[0]
    base = int(s[0]["Address"], 16)
    rows = [(int(r["Address"], 16) - base, r) for r in s]
    A = [x for x, r in rows if "USETMAXREG.TRY_ALLOC" in r["Source"]]
    D = [x for x, r in rows if "USETMAXREG.DEALLOC" in r["Source"]]
    spans = [(x, min(d for d in D if d > x)) for x in A]
    cons = [r for x, r in rows if any(p <= x < q for p, q in spans)]
    cnt = collections.Counter(num(r["Instructions Executed"]) for r in cons)
    mode = max((c for c in cnt if c > 0), key=lambda c: c * cnt[c])
    units = mode / 4 * kpt / 128  # a warpgroup's 64-row x 128-key units (its 4 warps run each tile)
    ops = collections.Counter()
    for r in cons:
        op = r["Source"].split()
        op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "")
        ops[op.split(".")[0]] += num(r["Instructions Executed"]) / 4 / units
    res.append((os.path.basename(fn), ops))
keys = sorted(set(k for _, o in res for k in o), key=lambda k: -max(o[k] for _, o in res))
print("%-10s" % "op", " ".join("%12s" % n[:12] for n, _ in res))
print("%-10s" % "total", " ".join("%12.1f" % sum(o.values()) for _, o in res))
for k in keys:
    if max(o[k] for _, o in res) < 2: continue
    print("%-10s" % k, " ".join("%12.1f" % o[k] for _, o in res))
