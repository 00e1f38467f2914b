#!/usr/bin/env bash
# s34-sparse call 2: the sparse stream's range tiles with their descriptors off the step start
# (SPATTN_HOPPER_EARLY_DESC=2, main's knob: the sparse analogue of PD_PROBE 64's gain in call 1),
# per pair x dense against main's default (=0). main's spattn-bench (935fe86 = 384f218's code)
# in both arms, one process per cell, alternating ed0 / ed2, 3 processes each at 32K (dense in
# each process for vs_dense), then one each at 128K while time allows.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
M=dense,a_shape,vertical_slash,block_sparse,sampled_lines
export AB_BENCH_S=25
for r in 1 2 3; do
  ab_bench ed0 32768 7 16 $M SPATTN_HOPPER_EARLY_DESC=0
  ab_bench ed2 32768 7 16 $M SPATTN_HOPPER_EARLY_DESC=2
done
if [ "$SECONDS" -lt 30 ]; then
  AB_BENCH_S=20 ab_bench ed0 131072 3 4 $M SPATTN_HOPPER_EARLY_DESC=0
  AB_BENCH_S=20 ab_bench ed2 131072 3 4 $M SPATTN_HOPPER_EARLY_DESC=2
fi
kill $CLK 2>/dev/null
python3 - "$OUT"/raw/bench_ed0.jsonl "$OUT"/raw/bench_ed2.jsonl <<'PY' | tee "$OUT/table.txt"
import json, sys, collections
v = collections.defaultdict(list)
for fn in sys.argv[1:]:
    arm = fn.rsplit("bench_", 1)[1][:-6]
    for l in open(fn):
        try: r = json.loads(l)
        except ValueError: continue
        if "tflops" in r: v[(r["seq_len"], r["method"], arm)].append((r["tflops"], r.get("vs_dense", 0), r["kernel_ms"], r.get("pairs")))
for k in sorted(v):
    x = v[k]
    print("%6d %-15s %s tflops %s  vs_dense %s  kernel_ms %s  pairs %s" % (k[0], k[1], k[2],
          " ".join("%.0f" % a[0] for a in x), " ".join("%.3f" % a[1] for a in x),
          " ".join("%.3f" % a[2] for a in x), sorted({a[3] for a in x})))
for (L, m, arm) in sorted(v):
    if arm != "ed2" or (L, m, "ed0") not in v: continue
    a = sum(x[2] for x in v[(L, m, "ed0")]) / len(v[(L, m, "ed0")])
    b = sum(x[2] for x in v[(L, m, "ed2")]) / len(v[(L, m, "ed2")])
    print("%6d %-15s ed2 over ed0 (mean kernel ms) %.3f" % (L, m, a / b))
PY
ab_finish
