# Mean of the timed builds' stage lines per bench cell (the first line of each .err is the warmup),
# and each timed build's histogram (pass 2) time.
import glob, os, re, sys
d = sys.argv[1]
keys = ["row_stats", "histogram", "emit", "count", "fill"]
print("%-40s %s %s" % ("cell", " ".join("%9s" % k for k in keys), "  sum   per-build histogram"))
for f in sorted(glob.glob(os.path.join(d, "bench_*.err"))):
    rows = [l for l in open(f) if "gpu builder sampled_lines: est_setup" in l][1:]
    vals = [{k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+) ms", l)} for l in rows]
    if not vals: continue
    m = {k: sum(v.get(k, 0) for v in vals) / len(vals) for k in keys}
    tot = sum(sum(v.values()) for v in vals) / len(vals)
    print("%-40s %s %6.2f   %s" % (os.path.basename(f)[6:-4], " ".join("%9.3f" % m[k] for k in keys), tot,
                                  " / ".join("%.3f" % v["histogram"] for v in vals)))
