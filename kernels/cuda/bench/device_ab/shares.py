#!/usr/bin/env python3
"""One line per spattn-bench result in each raw/bench_VARIANT.jsonl given: build and kernel ms,
the build's share of their sum (issue 10 item 3: <= 10 %), density, recall, index entries and
pairs, so two variants' lines show at a glance whether they built the same index."""
import json
import os
import sys

for path in sys.argv[1:]:
    v = os.path.basename(path)[len("bench_"):-len(".jsonl")]
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
