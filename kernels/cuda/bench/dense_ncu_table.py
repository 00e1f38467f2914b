#!/usr/bin/env python3
"""The table of run_dense_ncu.sh's ncu.txt: per cell our kernel and cuDNN's, each one launch under
ncu's clock control, compared in SM cycles (sm__cycles_elapsed.max: the kernel's length at
whatever clock ncu held) and in time, with each side's clock, L2 hit rate and DRAM reads.

ratio = cuDNN / ours (> 1: ours is faster), as in dense_matrix.py. cuDNN's launches come in
sdpa_reference.py's order (one JSON line per combination, `launches` reports each: warm-up,
then timed); the last report of each combination is its row.

Usage: python3 dense_ncu_table.py ncu.txt [--launches 2]
"""
import argparse
import json
import re
import sys

UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "s": 1e3, "second": 1e3}
METRICS = {
    "sm__cycles_elapsed.max": "cycles",
    "gpu__time_duration.sum": "ms",
    "sm__cycles_elapsed.avg.per_second": "ghz",
    "lts__t_sector_hit_rate.pct": "l2_hit",
    "dram__bytes_read.sum": "dram_gb",
}
BYTES = {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3}
HZ = {"hz": 1e-9, "Khz": 1e-6, "Mhz": 1e-3, "Ghz": 1.0}
REPORT = re.compile(r"^\s+(\S+) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")


def metric(line):
    """(field, value) of a metric line ncu prints as 'name  unit  value', else None."""
    parts = line.split()
    if len(parts) < 2 or parts[0] not in METRICS:
        return None
    field, raw = METRICS[parts[0]], parts[-1].replace(",", "")
    unit = parts[1] if len(parts) >= 3 else ""
    try:
        v = float(raw)
    except ValueError:
        return None
    if field == "ms":
        v *= UNITS.get(unit, 1.0)
    elif field == "dram_gb":
        v *= BYTES.get(unit, 1.0)
    elif field == "ghz":
        v *= HZ.get(unit, 1.0)
    return field, v


def shape_key(text):
    """(seq_len, kv_heads, head_dim, causal, dtype) of '--seq_lens=8192 --kv_heads=8 ...'."""
    f = dict(re.findall(r"--(\w+)[= ](\S+)", text))
    return (int(f["seq_lens"]), int(f["kv_heads"]), int(f["head_dim"]), int(f["causal"]),
            f["dtype"])


def parse(path, launches=2):
    """{key: {"ours": {...}, "ours [knobs]": {...}, "cudnn": {...}}} in first-seen order."""
    cells = {}
    block, cur = None, None
    cudnn_combos, cudnn_reports = [], []

    def flush_cudnn():
        for j, rep in enumerate(cudnn_reports):
            c = j // launches
            if c < len(cudnn_combos):
                cells.setdefault(cudnn_combos[c], {})["cudnn"] = rep  # the last one wins
        cudnn_combos.clear()
        cudnn_reports.clear()

    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("=== rc="):
            continue
        if line.startswith("=== "):
            if block == "cudnn":
                flush_cudnn()
            head = line[4:]
            if head.startswith("ours "):
                block = "ours"
                knobs = re.search(r"\[(.*)\]", head)
                name = "ours [%s]" % knobs.group(1) if knobs else "ours"
                cur = cells.setdefault(shape_key(head), {}).setdefault(name, {})
            elif head.startswith("cudnn "):
                block, cur = "cudnn", None
            else:
                block, cur = None, None
            continue
        if block == "cudnn":
            if line.startswith("{"):
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                cudnn_combos.append((r["seq_len"], r["kv_heads"], r["head_dim"], r["causal"],
                                     r["dtype"]))
                continue
            m = REPORT.match(line)
            if m:
                cur = {"kernel": m.group(1)}
                cudnn_reports.append(cur)
                continue
        if cur is not None:
            kv = metric(line)
            if kv:
                cur[kv[0]] = kv[1]
    if block == "cudnn":
        flush_cudnn()
    return cells


def label(key):
    n, kvh, d, c, dt = key
    return "%dK %s %s d%d %s" % (n // 1024, dt, "GQA" if kvh != 32 else "MHA", d,
                                 "causal" if c else "full")


def table(cells):
    out = ["cell                      side                              cycles M   ms      GHz  "
           "L2 hit  DRAM GB | cuDNN/side: cycles   ms"]
    for key, sides in cells.items():
        cud = sides.get("cudnn", {})
        for name in sorted(sides, key=lambda s: (s == "cudnn", s)):
            r = sides[name]
            ratio_c = ratio_t = ""
            if name != "cudnn" and cud.get("cycles") and r.get("cycles"):
                ratio_c = "%.3f" % (cud["cycles"] / r["cycles"])
            if name != "cudnn" and cud.get("ms") and r.get("ms"):
                ratio_t = "%.3f" % (cud["ms"] / r["ms"])
            out.append("%-25s %-32s %9.2f %8.3f %5.2f %6.1f%% %8.2f | %6s %6s" % (
                label(key), name[:32], r.get("cycles", 0) / 1e6, r.get("ms", 0),
                r.get("ghz", 0), r.get("l2_hit", 0), r.get("dram_gb", 0), ratio_c, ratio_t))
        if cud.get("kernel"):
            out.append("%-25s   cuDNN kernel: %s" % ("", cud["kernel"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ncu_txt")
    ap.add_argument("--launches", type=int, default=2,
                    help="cuDNN reports per combination (sdpa_reference.py --warmup + --iters)")
    args = ap.parse_args()
    print(table(parse(args.ncu_txt, args.launches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
