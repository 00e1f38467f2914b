import sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from parse import sections, num
fn, idx, a0, a1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 16), int(sys.argv[4], 16)
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
stalls = [k for k in s[0] if k.startswith("stall_") and "Not Issued" not in k]
for r in s:
    a = int(r["Address"], 16) - base
    if a0 <= a <= a1:
        sm = num(r["Warp Stall Sampling (All Samples)"])
        top = sorted(((num(r[k]), k[6:]) for k in stalls), reverse=True)[:2]
        print("%05x %9.0f %6.0f %-70s %s" % (a, num(r["Instructions Executed"]), sm, r["Source"].strip()[:70], " ".join("%s:%d" % (k, v) for v, k in top if v > 0)))
