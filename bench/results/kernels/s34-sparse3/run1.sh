#!/usr/bin/env bash
# s34-sparse3 call 1: SPATTN_HOPPER_EARLY_K0 (an item's first K from its schedule record, before
# the item's lookup, Q and walk). attention_cuda_test's sparse tests (the byte-identity test
# SparseEarlyK0MatchesDefault among them), then spattn-bench main (base) vs this branch with the
# knob on (new), one process per cell, alternating: sampled_lines and guarded 3 each at 32K,
# a_shape 2 each, sampled_lines 1 each at 128K; this branch with the knob off (off) twice for
# sampled_lines at 32K (the code's cost without the early K0), while time allows.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
ab_test attn 60 bin/attention_cuda_test --gtest_filter='*Sparse*:*AShape*:*Columns*:*EmptyRows*'
export AB_STOP_AFTER=95 AB_BENCH_S=25
for r in 1 2 3; do
  ab_bench base 32768 7 16 sampled_lines
  ab_bench new 32768 7 16 sampled_lines SPATTN_HOPPER_EARLY_K0=1
done
for r in 1 2 3; do
  AB_BENCH_S=40 ab_bench base 32768 7 16 guarded
  AB_BENCH_S=40 ab_bench new 32768 7 16 guarded SPATTN_HOPPER_EARLY_K0=1
done
AB_BENCH_S=30 ab_bench base 131072 3 4 sampled_lines
AB_BENCH_S=30 ab_bench new 131072 3 4 sampled_lines SPATTN_HOPPER_EARLY_K0=1
for r in 1 2; do
  ab_bench base 32768 7 16 a_shape
  ab_bench new 32768 7 16 a_shape SPATTN_HOPPER_EARLY_K0=1
done
ab_bench off 32768 7 16 sampled_lines
ab_bench off 32768 7 16 sampled_lines
kill $CLK 2>/dev/null
python3 - "$OUT"/raw/bench_*.jsonl <<'PY' | tee "$OUT/table.txt"
import json, sys, collections
v = collections.defaultdict(list)
for fn in sys.argv[1:]:
    arm = fn.rsplit("bench_", 1)[1][:-6]
    for l in open(fn):
        try: r = json.loads(l)
        except ValueError: continue
        if "kernel_ms" in r: v[(r["seq_len"], r["method"], arm)].append((r.get("tflops", 0), r["kernel_ms"], r.get("pairs"), r.get("recall"), r.get("build_ms")))
for k in sorted(v):
    x = v[k]
    print("%6d %-15s %-5s tflops %s  kernel_ms %s  pairs %s recall %s" % (k[0], k[1], k[2],
          " ".join("%.0f" % a[0] for a in x), " ".join("%.3f" % a[1] for a in x),
          sorted({a[2] for a in x}), sorted({a[3] for a in x})))
for (L, m, arm) in sorted(v):
    if arm == "base" or (L, m, "base") not in v: continue
    a = sum(x[1] for x in v[(L, m, "base")]) / len(v[(L, m, "base")])
    b = sum(x[1] for x in v[(L, m, arm)]) / len(v[(L, m, arm)])
    print("%6d %-15s %s: base / %s mean kernel ms %.4f" % (L, m, arm, arm, a / b))
PY
ab_finish
