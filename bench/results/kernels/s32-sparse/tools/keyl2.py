import sys, collections
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "../../s30-sparse/tools"))
from parse import sections, num
fn, idx, smc, kpt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
stalls = [k for k in s[0] if k.startswith("stall_") and "Not Issued" not in k]
rows = [(int(r["Address"], 16) - base, r) for r in s]
A = [a for a, r in rows if "USETMAXREG.TRY_ALLOC" in r["Source"]]
Dl = [a for a, r in rows if "USETMAXREG.DEALLOC" in r["Source"]]
spans = [(a, min(d for d in Dl if d > a)) for a in A]
cons = [(a, r) for a, r in rows if any(x <= a < y for x, y in spans)]
cnt = collections.Counter(num(r["Instructions Executed"]) for a, r in cons)
mode = max((c for c in cnt if c > 0), key=lambda c: c * cnt[c])
tiles128 = mode / 8 * kpt / 128
period = smc / (tiles128 / 132)
S = sum(num(r["Warp Stall Sampling (All Samples)"]) for a, r in cons)
f = period / S
print(fn, "period %.0f" % period)
for a, r in cons:
    src = r["Source"].strip()
    sm = num(r["Warp Stall Sampling (All Samples)"]) * f
    if sm < 8: continue
    if any(k in src for k in ("DEPBAR", "BAR.SYNC", "BAR.ARV", "HGMMA", "TRYWAIT", "BRA", "NANOSLEEP", "SYNCS")):
        d = {k[6:]: num(r[k]) * f for k in stalls}
        d["unl"] = sm - sum(d.values())
        print("  %05x %9.0f %6.1f %-58s %s" % (a, num(r["Instructions Executed"]), sm, src[:58], " ".join("%s:%.0f" % kv for kv in sorted(d.items(), key=lambda kv: -kv[1])[:3] if kv[1] >= 1)))
