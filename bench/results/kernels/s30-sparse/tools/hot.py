import sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from parse import sections, num
fn, idx, thr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
stalls = [k for k in s[0] if k.startswith("stall_") and "Not Issued" not in k]
tot_i = sum(num(r["Instructions Executed"]) for r in s); tot_s = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in s)
print("total inst %.4g samples %.4g" % (tot_i, tot_s))
for r in s:
    ie = num(r["Instructions Executed"]); sm = num(r["Warp Stall Sampling (All Samples)"])
    if ie >= thr or sm >= tot_s * 0.002:
        top = sorted(((num(r[k]), k[6:]) for k in stalls), reverse=True)[:2]
        print("%05x %10.0f %6.0f %-60s %s" % (int(r["Address"], 16) - base, ie, sm, r["Source"].strip()[:60], " ".join("%s:%d" % (k, v) for v, k in top if v > 0)))
