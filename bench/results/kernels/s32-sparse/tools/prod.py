import sys, collections
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "../../s30-sparse/tools"))
from parse import sections, num
fn, idx, tiles = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
rows = [(int(r["Address"], 16) - base, r) for r in s]
A = [a for a, r in rows if "USETMAXREG.TRY_ALLOC" in r["Source"]]
Dl = [a for a, r in rows if "USETMAXREG.DEALLOC" in r["Source"]]
spans = [(a, min(d for d in Dl if d > a)) for a in A]
def cons(a): return any(x <= a < y for x, y in spans)
ops = collections.Counter(); tot = 0; smp = 0; smpc = 0
for a, r in rows:
    ie = num(r["Instructions Executed"]); sm = num(r["Warp Stall Sampling (All Samples)"])
    if cons(a): smpc += sm; continue
    op = r["Source"].split()
    op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "")
    ops[op.split(".")[0]] += ie; tot += ie; smp += sm
print(fn, "non-consumer warp-instructions per tile %.1f; samples non-consumer %.0f consumer %.0f" % (tot / tiles, smp, smpc))
print("  ", " ".join("%s:%.1f" % (k, v / tiles) for k, v in ops.most_common(12)))
