# s32's regions_all.py with the consumer warps per tile as an argument (block_m 64: 4, 128: 8).
# usage: regions_wg.py sass.csv section sm_cycles keys_per_tile warps_per_tile [min_cycles]
import sys, collections
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "../../s30-sparse/tools"))
from parse import sections, num
fn, idx, smc, kpt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
wpt = float(sys.argv[5])
minc = float(sys.argv[6]) if len(sys.argv) > 6 else 5
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
stalls = [k for k in s[0] if k.startswith("stall_") and "Not Issued" not in k]
rows = [(int(r["Address"], 16) - base, r) for r in s]
A = [a for a, r in rows if "USETMAXREG.TRY_ALLOC" in r["Source"]]
Dl = [a for a, r in rows if "USETMAXREG.DEALLOC" in r["Source"]]
spans = [(a, min(d for d in Dl if d > a)) for a in A]
def ins(a): return any(x <= a < y for x, y in spans)
cons = [(a, r) for a, r in rows if ins(a)]
c0, c1 = spans[0][0], spans[-1][1]
cnt = collections.Counter(num(r["Instructions Executed"]) for a, r in cons)
mode = max((c for c in cnt if c > 0), key=lambda c: c * cnt[c])
tiles = mode / wpt
tiles128 = tiles * kpt / 128
period = smc / (tiles128 / 132)
S = sum(num(r["Warp Stall Sampling (All Samples)"]) for a, r in cons)
f = period / S
print("%s[%d]: consumer %x-%x tiles %.0f (x%.3f) period/128 keys %.0f cycles; consumer inst/warp/tile128 %.0f" % (
    fn, idx, c0, c1, tiles, kpt / 128, period, sum(num(r["Instructions Executed"]) for a, r in cons) / wpt / tiles128))
tot = collections.Counter()
runs = []; cur = None
for a, r in cons:
    ie = num(r["Instructions Executed"])
    d = {k[6:]: num(r[k]) * f for k in stalls}
    d["unlisted"] = (num(r["Warp Stall Sampling (All Samples)"]) - sum(num(r[k]) for k in stalls)) * f
    tot.update(d)
    if cur is None or abs(ie - cur["ie"]) > 0.01 * max(ie, 1):
        cur = dict(a0=a, a1=a, ie=ie, n=0, d=collections.Counter(), ops=collections.Counter()); runs.append(cur)
    cur["a1"] = a; cur["n"] += 1; cur["d"].update(d)
    op = r["Source"].split()
    op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "")
    cur["ops"][op.split(".")[0]] += 1
print("  total:", " ".join("%s:%.0f" % kv for kv in tot.most_common(14) if kv[1] >= 1))
for c in runs:
    t = sum(c["d"].values())
    if t < minc: continue
    print("  %05x-%05x n=%4d cnt=%9.0f cyc=%6.1f | %s | %s" % (c["a0"], c["a1"], c["n"], c["ie"], t,
        " ".join("%s:%.0f" % kv for kv in c["d"].most_common(4) if kv[1] >= 1),
        " ".join("%s:%d" % kv for kv in c["ops"].most_common(5))))
