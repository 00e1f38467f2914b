#!/usr/bin/env python3
"""Where a GPU index build's time goes, from spattn-bench runs with SPATTN_GPU_BUILDER_PROFILE=1.

Each argument names one run: PREFIX or LABEL=PREFIX, reading PREFIX.jsonl (spattn-bench's lines)
and PREFIX.err (its stderr, which carries one "gpu builder METHOD: STAGE X ms ..." line per build
and "spattn-bench: workload ... seq_len N ..." before each run's builds). For every (run, seq_len,
method) it prints the median of each stage over the builds (the first build, a warm-up, left
out when there are more), their sum, the bench's index_build_ms, the gap between the two (host
time the stages do not cover: launches, syncs, the bench's own per-slot pair count) and the
build's share of the method's total (index_build_ms / total_ms; issue 10 item 3 wants <= 10%).

  builder_stages.py base=out/bench_base new=out/bench_new          # a table
  builder_stages.py --json out/bench_new                           # one JSON line per row

Until session 23 each helper copied its own stages.py next to its results; this is the one tool.
"""
import argparse
import collections
import json
import os
import re
import sys

WORKLOAD = re.compile(r"spattn-bench: workload .* seq_len (\d+)")
STAGES = re.compile(r"gpu builder (\w+): (.*)")
STAGE = re.compile(r"(\w+) ([\d.]+) ms")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def read_run(prefix):
    """(seq_len, method) -> {"stages": [(name, median ms)], "builds": n, "bench": line or None}."""
    bench = {}
    with open(prefix + ".jsonl") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "error" in r or "index_build_ms" not in r:
                continue
            bench[(int(r["seq_len"]), r["method"])] = r
    builds = collections.OrderedDict()
    seq = None
    with open(prefix + ".err") as f:
        for line in f:
            m = WORKLOAD.search(line)
            if m:
                seq = int(m.group(1))
                continue
            m = STAGES.search(line)
            if m and seq is not None:
                builds.setdefault((seq, m.group(1)), []).append(
                    [(n, float(x)) for n, x in STAGE.findall(m.group(2))])
    rows = collections.OrderedDict()
    for key, runs in builds.items():
        timed = runs[1:] if len(runs) > 1 else runs
        names = []
        for r in timed:
            for n, _ in r:
                if n not in names:
                    names.append(n)
        stages = [(n, median([x for r in timed for m, x in r if m == n])) for n in names]
        rows[key] = {"stages": stages, "builds": len(timed), "bench": bench.get(key)}
    return rows


def summarize(label, rows):
    out = []
    for (seq, method), row in rows.items():
        total = sum(x for _, x in row["stages"])
        o = {"run": label, "seq_len": seq, "method": method, "builds": row["builds"],
             "stages": collections.OrderedDict(row["stages"]), "stage_sum_ms": round(total, 4)}
        b = row["bench"]
        if b is not None:
            build = float(b["index_build_ms"])
            o["index_build_ms"] = build
            o["gap_ms"] = round(build - total, 4)
            t = float(b.get("total_ms", build + float(b.get("kernel_ms", 0))))
            if t > 0:
                o["build_share"] = round(build / t, 4)
        out.append(o)
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="PREFIX or LABEL=PREFIX (PREFIX.jsonl, PREFIX.err)")
    ap.add_argument("--json", action="store_true", help="one JSON line per row")
    a = ap.parse_args(argv)
    for spec in a.runs:
        label, _, prefix = spec.rpartition("=")
        label = label or os.path.basename(prefix)
        try:
            rows = summarize(label, read_run(prefix))
        except OSError as e:
            print("builder_stages.py: %s: %s" % (spec, e), file=sys.stderr)
            return 1
        for o in rows:
            if a.json:
                print(json.dumps(o))
                continue
            stages = " ".join("%s %.3f" % kv for kv in o["stages"].items())
            tail = "| stages %.3f" % o["stage_sum_ms"]
            if "index_build_ms" in o:
                tail += " build %.3f gap %.3f" % (o["index_build_ms"], o["gap_ms"])
            if "build_share" in o:
                tail += " share %.1f%%" % (100 * o["build_share"])
            print("%-8s %8d %-17s %s %s" % (label, o["seq_len"], o["method"], stages, tail))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
