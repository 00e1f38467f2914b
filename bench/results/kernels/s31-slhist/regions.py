# Pass 2's SASS (ncu source page CSV, base e30e6a9, 128K) summed by region of the tile loop:
# share of stall samples and of executed instructions, instructions per warp tile (6,584,320 warp
# tiles: the count of the loop's first line), top stall reasons. Regions by SASS offset (read off
# hot_base.txt). Usage: python3 regions.py sass_base.csv  (uses ../s30-sparse/tools/parse.py)
import collections, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "s30-sparse", "tools"))
from parse import sections, num
s = sections(sys.argv[1])[0]
base = int(s[0]["Address"], 16)
tiles = 6584320.0
regions = [("prologue / setup", 0, 0x41f0),
           ("tile top: cp.async wait, fence, barrier A, descriptors", 0x41f0, 0x4340),
           ("first HGMMA (where barrier A's wait is sampled)", 0x4340, 0x4350),
           ("other HGMMAs + wgmma wait", 0x4350, 0x4620),
           ("barrier B + tile t+1 copies (LDGSTS)", 0x4620, 0x4d30),
           ("tile skip test (tree max, vote)", 0x4d30, 0x5030),
           ("mass chains (plain + masked)", 0x5030, 0x7950),
           ("histogram updates (a branch per entry)", 0x7950, 0x8a80),
           ("epilogue", 0x8a80, 1 << 40)]
tot_s = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in s)
tot_i = sum(num(r["Instructions Executed"]) for r in s)
stalls = [k for k in s[0] if k.startswith("stall_") and "Not Issued" not in k]
def op(r):
    t = r["Source"].strip().split()
    if t and t[0].startswith("@"): t = t[1:]
    return t[0].split(".")[0] if t else ""
print("samples %.0f, instructions %.4g (%.0f per warp tile)" % (tot_s, tot_i, tot_i / tiles))
for name, a0, a1 in regions:
    rs = [r for r in s if a0 <= int(r["Address"], 16) - base < a1]
    sm = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rs)
    ie = sum(num(r["Instructions Executed"]) for r in rs)
    agg = collections.Counter()
    ops = collections.Counter()
    for r in rs:
        for k in stalls: agg[k] += num(r[k])
        ops[op(r)] += num(r["Instructions Executed"]) / tiles
    print("| %s | %.1f %% | %.1f %% | %.0f | %s | %s |" % (
        name, 100 * sm / tot_s, 100 * ie / tot_i, ie / tiles,
        ", ".join("%s %.0f %%" % (k[6:], 100 * v / max(sm, 1)) for k, v in agg.most_common(3)),
        " ".join("%s %.0f" % kv for kv in ops.most_common(6))))
