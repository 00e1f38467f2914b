"""Summary of an s22-dense run (python3 cells.py OUT_DIR):
1. per cell of the knob-set item (tags r/<set>): SDPA's passes, per set the median TFLOP/s of
   the rounds, its ratio to SDPA's mean and each round;
2. the clock item (tags clk-<dtype>, SDPA with iters 40): per process ms / TFLOP/s and, from
   clocks.csv between the process's start / end marks in summary.txt, the samples with power
   above 200 W: median SM clock, median power, and the share with a clock-event reason set;
3. 512K cells (tag r512): ours vs SDPA's one pass."""
import collections, datetime, json, os, statistics, sys

out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.startswith("{")]
key = lambda r: (r["seq_len"], r["kv_heads"], r["head_dim"], r["causal"], r["dtype"])
def name(k):
    n, kvh, d, c, dt = k
    return "%dK %s %s d%d %s" % (n // 1024, dt, "MHA" if kvh == 32 else "GQA", d,
                                 "causal" if c else "full")
sdpa, bench = rows("sdpa.jsonl"), rows("bench.jsonl")

print("== knob sets (r/<set>): median TFLOP/s (x SDPA mean) [rounds]")
sd = collections.defaultdict(list)
for r in sdpa:
    if r["seq_len"] == 32768 and r["iters"] == int(os.environ.get("SDPA_ITERS", "5")):
        sd[key(r)].append(r["tflops"])
ours = collections.defaultdict(lambda: collections.defaultdict(list))
for r in bench:
    if r.get("tag", "").startswith("r/") and r["kernel"].startswith("dense"):
        ours[key(r)][r["tag"][2:]].append(r["tflops"])
for k in sorted(ours):
    ref = statistics.mean(sd[k]) if sd.get(k) else float("nan")
    cells = []
    for v, xs in ours[k].items():
        m = statistics.median(xs)
        cells.append("%s %.0f (%.3f) [%s]" % (v, m, m / ref, "/".join("%.0f" % x for x in xs)))
    print("%-24s sdpa %-9s %s" % (name(k), "/".join("%.0f" % x for x in sd.get(k, [])),
                                  " | ".join(cells)))

print("== clock item")
def ts(s):
    return datetime.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f")
marks = []
sp = os.path.join(out, "summary.txt")
for line in open(sp) if os.path.exists(sp) else []:
    if " | start " in line or " | end " in line:
        t, rest = line.split(" | ", 1)
        marks.append((ts(t), rest.strip()))
samples = []
cp = os.path.join(out, "clocks.csv")
for line in open(cp) if os.path.exists(cp) else []:
    f = [x.strip() for x in line.split(",")]
    try:
        samples.append((ts(f[0]), float(f[1].split()[0]), float(f[2].split()[0]), f[4]))
    except (ValueError, IndexError):
        pass
for i, (t0, what) in enumerate(marks):
    if not what.startswith("start") or ("clk-" not in what and "--iters=40" not in what):
        continue
    t1 = next((t for t, w in marks[i + 1:] if w.startswith("end")), None)
    if t1 is None:
        continue
    win = [s for s in samples if t0 <= s[0] <= t1 and s[2] > 200]
    if not win:
        print("%s: no samples above 200 W" % what[:60])
        continue
    reasons = collections.Counter(s[3] for s in win)
    print("%-60s n=%3d sm %4.0f MHz (min %4.0f) power %3.0f W (max %3.0f) reasons %s" % (
        what[:60], len(win), statistics.median(s[1] for s in win), min(s[1] for s in win),
        statistics.median(s[2] for s in win), max(s[2] for s in win), dict(reasons)))
for r in bench:
    if r.get("tag", "").startswith("clk-"):
        print("ours %-8s %s %.3f ms %.0f TFLOP/s" % (r["tag"], name(key(r)), r["ms"], r["tflops"]))
for r in sdpa:
    if r["iters"] == 40:
        print("sdpa %-8s %s %.3f ms %.0f TFLOP/s" % (r["dtype"], name(key(r)), r["ms"], r["tflops"]))

print("== 512K (r512)")
sd5 = collections.defaultdict(list)
for r in sdpa:
    if r["seq_len"] >= 524288:
        sd5[key(r)].append(r["tflops"])
for r in bench:
    if r.get("tag") == "r512" and r["kernel"].startswith("dense"):
        s = sd5.get(key(r), [])
        ref = statistics.mean(s) if s else float("nan")
        print("%-24s ours %.0f sdpa %s (%.3f)" % (name(key(r)), r["tflops"],
                                                   "/".join("%.0f" % x for x in s),
                                                   r["tflops"] / ref))
