#!/usr/bin/env bash
# s35-prep-earlyk0 call 1 (prepared in session 35, not run): SPATTN_HOPPER_EARLY_K0 as kernel
# instances of their own (EarlyK0<Tr>; the default kernels' sm_90a .text equal main's).
# attention_cuda_test's sparse tests (SparseEarlyK0MatchesDefault among them), then ONE
# spattn-bench binary (this branch) with the knob off ("off") and on ("on"), one process per cell,
# alternating: sampled_lines and guarded 3 each at 32K, a_shape 1 each, sampled_lines 1 each at
# 128K. (No base binary: "off" runs the default kernels, whose code is main's.)
# Pack (from the worktree root, after the opt build):
#   DEST=/work/main/.device/s35-prep-earlyk0 kernels/cuda/bench/device_ab/pack.sh \
#     tests/bench/spattn-bench kernels/cuda/attention_cuda_test
#   cp bench/results/kernels/s35-prep-earlyk0/run1.sh /work/main/.device/s35-prep-earlyk0/
# Run: carry [".device/s35-prep-earlyk0"], command `bash .device/s35-prep-earlyk0/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
ab_test attn 60 bin/attention_cuda_test --gtest_filter='*Sparse*'
export AB_STOP_AFTER=130 AB_BENCH_S=25
for r in 1 2 3; do
  ab_bench off 32768 7 16 sampled_lines
  ab_bench on 32768 7 16 sampled_lines SPATTN_HOPPER_EARLY_K0=1
done
for r in 1 2 3; do
  AB_BENCH_S=40 ab_bench off 32768 7 16 guarded
  AB_BENCH_S=40 ab_bench on 32768 7 16 guarded SPATTN_HOPPER_EARLY_K0=1
done
ab_bench off 32768 7 16 a_shape
ab_bench on 32768 7 16 a_shape SPATTN_HOPPER_EARLY_K0=1
AB_BENCH_S=30 ab_bench off 131072 3 4 sampled_lines
AB_BENCH_S=30 ab_bench on 131072 3 4 sampled_lines SPATTN_HOPPER_EARLY_K0=1
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
    print("%6d %-15s %-4s tflops %s  kernel_ms %s  pairs %s recall %s" % (k[0], k[1], k[2],
          " ".join("%.0f" % a[0] for a in x), " ".join("%.3f" % a[1] for a in x),
          sorted({a[2] for a in x}), sorted({a[3] for a in x})))
for (L, m, arm) in sorted(v):
    if arm != "on" or (L, m, "off") not in v: continue
    a = sum(x[1] for x in v[(L, m, "off")]) / len(v[(L, m, "off")])
    b = sum(x[1] for x in v[(L, m, "on")]) / len(v[(L, m, "on")])
    print("%6d %-15s off / on mean kernel ms %.4f (> 1: the early K0 faster)" % (L, m, a / b))
PY
ab_finish
