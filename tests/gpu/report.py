#!/usr/bin/env python3
"""Prints the README's GPU table from a device run's raw lines.

Reads spattn-bench JSON lines (bench.jsonl, bench_1m*.jsonl) and PyTorch SDPA lines (sdpa.jsonl,
sdpa_chunk.jsonl) of ONE run and prints, per (keys, queries) shape, one markdown row per method:
index and kernel ms, their total against cuDNN on the same shape, the build's share of the total
(issue 10 item 3, issue 11 item 5), density and its ratio to the oracle of the same query-block
size (issue 11 item 4), recall and how many heads are within 0.02 of the target (issue 11 item 3),
and the kernel's per-pair TFLOP/s against the dense kernel's in the same run (issue 10 item 2).

  python3 tests/gpu/report.py bench/results/gpu/<run>/bench.jsonl bench/results/gpu/<run>/sdpa.jsonl
"""
import argparse
import json
import os
import re
import sys


def read_lines(paths):
    rows = []
    for path in paths:
        # run_1m.sh writes its 128-row-block lines to bench_1m_bm128.jsonl under the plain method
        # name: the file's _bmN names their block size.
        m = re.search(r"_bm(\d+)", os.path.basename(path))
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit("%s:%d: not a JSON line (%s)" % (path, n, e))
                if m and "method" in r and "_bm" not in r["method"]:
                    r["method"] += "_bm" + m.group(1)
                if "device" in r:  # spattn-bench says "cuda:0 (NAME)", SDPA "NAME"
                    r["device"] = re.sub(r"^cuda:\d+ \((.*)\)$", r"\1", r["device"])
                rows.append(r)
    return rows


def shape_of(r):
    """(keys, queries) of a bench or SDPA line."""
    keys = r.get("k_len", r.get("seq_len"))
    return keys, r.get("q_len", keys)


def block_of(method):
    """Query-block rows a bench method's index used: the _bmN suffix, else the default 64."""
    base, _, suffix = method.rpartition("_bm")
    if base and suffix.isdigit():
        return base, int(suffix)
    return method, 64


def heads_within(r, target, slack):
    heads = [float(h.split(":")[1]) for h in r.get("recall_heads", "").split(",") if ":" in h]
    return sum(h >= target - slack for h in heads), len(heads)


def fmt_ms(v):
    return "%.2f" % v if v < 100 else "%.1f" % v


def report(rows, target, slack, out):
    cudnn = {}
    for r in rows:
        if r.get("kernel", "").startswith("sdpa_cudnn"):
            cudnn[shape_of(r)] = r["ms"]
    bench = [r for r in rows if "method" in r]
    oracle = {}
    dense_tflops = {}
    for r in bench:
        base, block = block_of(r["method"])
        if base == "oracle":
            oracle[(shape_of(r), block)] = r["column_density"]
        elif r["method"] == "dense" and "tflops" in r:
            dense_tflops[shape_of(r)] = r["tflops"]
    gpus = sorted({r["device"] for r in rows if "device" in r})
    out.write("GPU: %s\n" % (", ".join(gpus) or "unknown"))
    shapes = sorted({shape_of(r) for r in bench})
    for shape in shapes:
        keys, queries = shape
        sdpa = cudnn.get(shape)
        out.write("\n### %d keys, %d queries (cuDNN SDPA %s ms)\n\n" %
                  (keys, queries, fmt_ms(sdpa) if sdpa else "not in this run"))
        out.write("| method | index ms | kernel ms | total ms | total / cuDNN | build share | density | x oracle |"
                  " recall mean / lowest head | heads >= %.2f | pair TFLOP/s (x dense) |\n" %
                  (target - slack))
        out.write("|" + " --- |" * 11 + "\n")
        for r in bench:
            if shape_of(r) != shape:
                continue
            base, block = block_of(r["method"])
            if base == "oracle":
                out.write("| oracle, %d-row blocks (target %.2f) | | | | | | row %.4f / column %.4f /"
                          " block %.4f | 1 | | | |\n" % (block, r["target"], r["row_density"],
                                                        r["column_density"], r["block_density"]))
                continue
            if "error" in r:
                out.write("| %s | error: %s |\n" % (r["method"], r["error"][:120]))
                continue
            b, k = r["index_build_ms"], r["kernel_ms"]
            total = b + k
            ratio = "%.2fx" % (total / sdpa) if sdpa else "-"
            orc = oracle.get((shape, block))
            x_oracle = "%.2f" % (r["density"] / orc) if orc and base != "dense" else ""
            n, m = heads_within(r, target, slack)
            dense = dense_tflops.get(shape)
            pair = ""
            if "tflops" in r:
                pair = "%.0f" % r["tflops"]
                if dense and r["method"] != "dense":
                    pair += " (%.2f)" % (r["tflops"] / dense)
            out.write("| %s | %s | %s | %s | %s | %.1f%% | %.4f | %s | %.3f / %.3f | %s | %s |\n" % (
                r["method"], fmt_ms(b), fmt_ms(k), fmt_ms(total), ratio, 100.0 * b / total,
                r["density"], x_oracle, r["recall"], r.get("recall_head_min", float("nan")),
                "%d/%d" % (n, m) if m else "-", pair))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench and SDPA JSON-lines files of one device run")
    ap.add_argument("--target", type=float, default=0.95, help="the recall target the run served")
    ap.add_argument("--slack", type=float, default=0.02, help="'within' distance below the target")
    args = ap.parse_args()
    rows = read_lines(args.files)
    if not any("method" in r for r in rows):
        sys.exit("no spattn-bench lines in %s" % " ".join(args.files))
    return report(rows, args.target, args.slack, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
