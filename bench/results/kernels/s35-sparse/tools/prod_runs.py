# Non-consumer (producer) SASS of an ncu source CSV in runs of equal execution count:
# warp-instructions per tile and stall samples per run. usage: prod_runs.py sass.csv tiles [min]
import sys, collections, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../s30-sparse/tools"))
from parse import sections, num
fn, tiles = sys.argv[1], float(sys.argv[2])
mn = float(sys.argv[3]) if len(sys.argv) > 3 else 5
s = sections(fn)[0]
base = int(s[0]["Address"], 16)
rows = [(int(r["Address"], 16) - base, r) for r in s]
A = [a for a, r in rows if "USETMAXREG.TRY_ALLOC" in r["Source"]]
Dl = [a for a, r in rows if "USETMAXREG.DEALLOC" in r["Source"]]
spans = [(a, min(d for d in Dl if d > a)) for a in A]
def cons(a): return any(x <= a < y for x, y in spans)
runs = []; cur = None
for a, r in rows:
    if cons(a): cur = None; continue
    ie = num(r["Instructions Executed"]); sm = num(r["Warp Stall Sampling (All Samples)"])
    if cur is None or abs(ie - cur["ie"]) > 0.01 * max(ie, 1):
        cur = dict(a0=a, a1=a, ie=ie, n=0, sm=0, src=[]); runs.append(cur)
    cur["a1"] = a; cur["n"] += 1; cur["sm"] += sm; cur["src"].append(r["Source"].strip()[:60])
for c in runs:
    w = c["ie"] * c["n"] / tiles
    if w < mn: continue
    print("%05x-%05x n=%3d per-exec/tile %.3f warp-inst/tile %.1f samples %.0f | %s" % (
        c["a0"], c["a1"], c["n"], c["ie"] / tiles, w, c["sm"], " ; ".join(c["src"][:6])))
