import sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from parse import sections, num
fn, idx = sys.argv[1], int(sys.argv[2])
lo_c, hi_c = float(sys.argv[3]), float(sys.argv[4])   # count window for "per tile" lines
s = sections(fn)[idx]
base = int(s[0]["Address"], 16)
tot_s = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in s)
# contiguous runs of lines whose count is within the window
runs = []; cur = None
for r in s:
    a = int(r["Address"], 16) - base; ie = num(r["Instructions Executed"]); sm = num(r["Warp Stall Sampling (All Samples)"])
    op = r["Source"].strip().split()
    op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "")
    inwin = lo_c <= ie <= hi_c
    if inwin:
        if cur is None: cur = dict(a0=a, a1=a, n=0, ie=0, sm=0, ops={}); runs.append(cur)
        cur["a1"] = a; cur["n"] += 1; cur["ie"] += ie; cur["sm"] += sm
        cur["ops"][op.split(".")[0]] = cur["ops"].get(op.split(".")[0], 0) + 1
    else:
        if cur is not None and ie == 0: continue  # (zero-count lines do not end a run)
        cur = None
print("total samples %.4g" % tot_s)
T = 0; S = 0
for c in runs:
    T += c["n"]; S += c["sm"]
    top = sorted(c["ops"].items(), key=lambda kv: -kv[1])[:6]
    print("%05x-%05x lines %4d samples %7.0f  %s" % (c["a0"], c["a1"], c["n"], c["sm"], " ".join("%s:%d" % kv for kv in top)))
print("lines", T, "samples", S)
