#!/usr/bin/env python3
"""The table of a run_dense_matrix.sh run: python3 dense_matrix.py OUT_DIR [--csv].

Per dense cell (seq_len, kv_heads, head_dim, causal, dtype): our median ms (cuda_bench's dense
line; per knob set when it ran --knob_sets), cuDNN's (sdpa_reference.py's line in the same run:
"ms" with the host's launch latency inside its events as in cuda_bench, "ms_gpu" where it ran
--presleep_us: the kernel alone), the ratio cuDNN ms / our ms (> 1: ours faster), TFLOP/s, and
for each side the median SM clock, median power and the share of samples with the power cap's
clock-event reason (0x4), and the median temperature, from OUT_DIR/clocks.csv (nvidia-smi, SAMPLE_MS apart) between the
line's "t0" and "t1" (Unix time of its timed launches). "r/clk" is the ratio in SM cycles,
(cuDNN ms x cuDNN MHz) / (our ms x our MHz): where it is >= 1.0 and the ratio is not, the cell
lost on clock state, not on the kernel (both compute-bound, cycles scale with the clock).

clocks.csv timestamps are nvidia-smi's local time; summary.txt's "epoch" line (Unix time taken
just before the sampler started) gives the offset (rounded to 15 minutes).
"""
import calendar
import collections
import json
import os
import statistics
import sys
import time

out = sys.argv[1]


def rows(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    res = []
    for line in open(p):
        if line.startswith("{"):
            try:
                res.append(json.loads(line))
            except ValueError:
                pass
    return res


def key(r):
    return (r["seq_len"], r["kv_heads"], r["head_dim"], r["causal"], r["dtype"])


def name(k):
    n, kvh, d, c, dt = k
    return "%s %s %s d%d %s" % ("%dK" % (n // 1024), dt, "MHA" if kvh == 32 else "GQA", d,
                                "causal" if c else "full")


# Clock samples: (unix time, SM MHz, W, reasons).
epoch = None
sp = os.path.join(out, "summary.txt")
for line in open(sp) if os.path.exists(sp) else []:
    if line.startswith("epoch "):
        epoch = float(line.split()[1])
samples = []
cp = os.path.join(out, "clocks.csv")
for line in open(cp) if os.path.exists(cp) else []:
    f = [x.strip() for x in line.split(",")]
    try:
        t = time.strptime(f[0].split(".")[0], "%Y/%m/%d %H:%M:%S")
        frac = float("0." + f[0].split(".")[1]) if "." in f[0] else 0.0
        samples.append([calendar.timegm(t) + frac, float(f[1].split()[0]),
                        float(f[2].split()[0]), f[4] if len(f) > 4 else "", float(f[3])])
    except (ValueError, IndexError):
        pass
if samples and epoch is not None:
    off = round((samples[0][0] - epoch) / 900.0) * 900.0
    for s in samples:
        s[0] -= off
sample_gap = (statistics.median(b[0] - a[0] for a, b in zip(samples, samples[1:]))
              if len(samples) > 2 else 0.05)


def clock(r):
    """(median MHz, median W, capped share, n) of the samples in r's window, or None."""
    if "t0" not in r or not samples:
        return None
    # A window shorter than two sample gaps takes the nearest samples around it.
    t0, t1 = r["t0"], r["t1"]
    if t1 - t0 < 2 * sample_gap:
        mid = (t0 + t1) / 2
        t0, t1 = mid - sample_gap, mid + sample_gap
    win = [s for s in samples if t0 <= s[0] <= t1]
    if not win:
        return None
    capped = sum(1 for s in win if s[3] and int(s[3], 16) & 0x4) / len(win)
    return (statistics.median(s[1] for s in win), statistics.median(s[2] for s in win), capped,
            statistics.median(s[4] for s in win), len(win))


sdpa = {}
for r in rows("sdpa.jsonl"):
    if r.get("kernel") == "sdpa_cudnn":
        sdpa[key(r)] = r  # the last pass of a shape
ours = collections.defaultdict(dict)  # cell -> set name -> line (the last round's)
rounds = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows("bench.jsonl"):
    if not r.get("kernel", "").startswith("dense"):
        continue
    tag = r.get("tag", "")
    s = tag.split("/", 1)[1] if "/" in tag else ""
    ours[key(r)][s] = r
    rounds[key(r)][s].append(r["ms"])

# A cell's table line is its first knob set's (the defaults: "" without --knob_sets).
main_of = {k: next(iter(v)) for k, v in ours.items()}


def fmt_clk(c):
    return ("%4.0f %3.0fW %2.0fC %3.0f%%" % (c[0], c[1], c[3], 100 * c[2]) if c else
            "   -               ")


hdr = ("%-24s %9s %9s %6s %6s %6s | %-19s | %-19s | %6s | %9s %6s | %s" %
       ("cell", "ours ms", "cuDNN ms", "ratio", "oursTF", "cudnTF", "ours MHz W C cap",
        "cuDNN MHz W C cap", "r/clk", "cuDNN gpu", "ratio", "iters o/c"))
print("== dense vs cuDNN (same run; ratio = cuDNN ms / ours ms; our first knob set)")
print(hdr)
below, ratios, ratios_gpu = [], [], []
csv = []
for k in sorted(set(ours) | set(sdpa)):
    o = ours[k][main_of[k]] if k in ours else None
    c = sdpa.get(k)
    if o is None or c is None:
        print("%-24s %s" % (name(k), "ours only" if o else "cuDNN only"))
        continue
    ratio = c["ms"] / o["ms"]
    co, cc = clock(o), clock(c)
    per_clk = ratio * (cc[0] / co[0]) if co and cc else float("nan")
    gpu = c.get("ms_gpu")
    rg = gpu / o["ms"] if gpu else float("nan")
    ratios.append(ratio)
    if gpu:
        ratios_gpu.append(rg)
    if ratio < 1.0:
        below.append((name(k), ratio, co, cc))
    print("%-24s %9.3f %9.3f %6.3f %6.0f %6.0f | %s | %s | %6.3f | %9s %6s | %s/%s" % (
        name(k), o["ms"], c["ms"], ratio, o["tflops"], c["tflops"], fmt_clk(co), fmt_clk(cc),
        per_clk, "%.3f" % gpu if gpu else "-", "%.3f" % rg if gpu else "-", o.get("iters"),
        c.get("iters")))
    csv.append([name(k), o["ms"], c["ms"], round(ratio, 4), o["tflops"], c["tflops"],
                co[0] if co else "", cc[0] if cc else "", gpu or "", round(rg, 4) if gpu else ""])
if ratios:
    print("cells %d, ratio min %.3f median %.3f max %.3f; below 1.0: %d %s" % (
        len(ratios), min(ratios), statistics.median(ratios), max(ratios), len(below),
        ", ".join("%s %.3f" % (b[0], b[1]) for b in below)))
if ratios_gpu:
    print("against cuDNN's kernel alone (ms_gpu): min %.3f median %.3f, below 1.0: %d" % (
        min(ratios_gpu), statistics.median(ratios_gpu), sum(1 for x in ratios_gpu if x < 1.0)))
multi = sorted(k for k in ours if len(ours[k]) > 1)
if multi:
    print("== knob sets (our ms per set (first set's ms / this one's, cuDNN ms / this one's) "
          "[each round's ms])")
    for k in multi:
        c = sdpa.get(k)
        parts = []
        for s, o in ours[k].items():
            base = ours[k][main_of[k]]["ms"]
            parts.append("%s %.3f (%.3f%s) [%s]" % (
                s or "-", o["ms"], base / o["ms"],
                ", %.3f" % (c["ms"] / o["ms"]) if c else "",
                "/".join("%.3f" % x for x in rounds[k][s])))
        print("%-24s %s" % (name(k), " | ".join(parts)))
if "--csv" in sys.argv:
    with open(os.path.join(out, "table.csv"), "w") as f:
        f.write("cell,ours_ms,cudnn_ms,ratio,ours_tflops,cudnn_tflops,ours_mhz,cudnn_mhz,"
                "cudnn_gpu_ms,ratio_gpu\n")
        for row in csv:
            f.write(",".join(str(x) for x in row) + "\n")
