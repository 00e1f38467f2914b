#!/usr/bin/env python3
"""One line per spattn-bench result in each raw/bench_VARIANT.jsonl given: build and kernel ms,
the build's share of their sum (issue 10 item 3: <= 10 %), density, recall, index entries and
pairs, so two variants' lines show at a glance whether they built the same index. Then a "mean"
line per (length, method, variant): its processes' mean build and kernel ms and per-pair TFLOP/s,
and the mean ms as a fraction of the reference variant's: the first whose name starts with "base"
(ab_bench's base binary), else the first file given — the A/B table each run script wrote for
itself before session 34."""
import collections
import json
import os
import sys

means = collections.defaultdict(list)  # (seq_len, method, variant) -> [(build, kernel, tflops)]
order = []  # variants in the order of the files given
for path in sys.argv[1:]:
    v = os.path.basename(path)[len("bench_"):-len(".jsonl")]
    order.append(v)
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "error" in r:
            print("%-10s %-16s %7s ERROR %s" % (v, r.get("method"), r.get("seq_len"), r["error"][:200]))
            continue
        if "index_build_ms" not in r:
            continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-10s %-16s %7d build %8.3f kernel %8.3f share %5.2f%% density %.8f recall %.6f entries %s/%s pairs %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"],
               r.get("index_ranges"), r.get("index_cols"), r.get("pairs")))
        means[(r["seq_len"], r["method"], v)].append((b, k, r.get("tflops")))


def mean(xs):
    return sum(xs) / len(xs)


ref = next((v for v in order if v.startswith("base")), order[0] if order else None)
for (n, m, v) in sorted(means, key=lambda key: (key[0], key[1], order.index(key[2]))):
    cells = means[(n, m, v)]
    b, k = mean([c[0] for c in cells]), mean([c[1] for c in cells])
    tf = [c[2] for c in cells if c[2] is not None]
    line = "mean %-10s %-16s %7d n %d build %8.3f kernel %8.3f tflops %s" % (
        v, m, n, len(cells), b, k, "%.1f" % mean(tf) if tf else "-")
    base = means.get((n, m, ref))
    if base and v != ref:
        bb, bk = mean([c[0] for c in base]), mean([c[1] for c in base])
        line += " | of %s's: build %s kernel %.3f" % (ref, "%.3f" % (b / bb) if bb else "-",
                                                      k / bk if bk else float("nan"))
    print(line)
