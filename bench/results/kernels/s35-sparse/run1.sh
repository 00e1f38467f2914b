#!/usr/bin/env bash
# s35-sparse call 1: (1) the prepared early K0 (s35-prep-earlyk0 merged): attention_cuda_test's
# sparse tests, then spattn-bench main's binary (base) / this branch knob off (off) / on (on), one
# process per cell, alternating: sampled_lines and guarded at 32K, a_shape 32K. (2) ncu source
# counters (clocks unlocked, one launch after the warm-up) of main's binary, a_shape 32K, the
# sparse stream at block_m 64 (default) and 128 (--block_m=128), the SASS source CSVs kept.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
ab_test attn 60 bin/attention_cuda_test --gtest_filter='*Sparse*'
export AB_STOP_AFTER=110 AB_BENCH_S=25
for r in 1 2; do
  ab_bench base 32768 7 16 sampled_lines
  ab_bench off 32768 7 16 sampled_lines
  ab_bench on 32768 7 16 sampled_lines SPATTN_HOPPER_EARLY_K0=1
done
for r in 1 2; do
  [ $r = 1 ] && AB_BENCH_S=30 ab_bench base 32768 7 16 guarded
  AB_BENCH_S=30 ab_bench off 32768 7 16 guarded
  AB_BENCH_S=30 ab_bench on 32768 7 16 guarded SPATTN_HOPPER_EARLY_K0=1
done
ab_bench off 32768 7 16 a_shape
ab_bench on 32768 7 16 a_shape SPATTN_HOPPER_EARLY_K0=1
kill $CLK 2>/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section InstructionStats"
prof() {  # name spattn-bench-args...
  local n=$1; shift
  timeout 40 $NCU --clock-control none -k regex:PersistentFa3 --launch-skip 1 --launch-count 1 $SEC \
    -o "$W/$n" -f bin/spattn-bench-base --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --warmup=1 --repeat=1 \
    --seq_len=32768 --methods=a_shape "$@" > "$OUT/raw/ncu_${n}_log.txt" 2>&1
  ab_note "ncu $n rc=$?"
  timeout 10 $NCU --import "$W/$n.ncu-rep" --print-details all > "$OUT/raw/ncu_$n.txt" 2>&1
  timeout 20 $NCU --import "$W/$n.ncu-rep" --page source --csv --print-source sass > "$W/sass_$n.csv" 2>&1
  xz -4 -T4 -c "$W/sass_$n.csv" > "$OUT/sass_$n.csv.xz"
  grep -E 'SM Active Cycles|Executed Instructions  |Issue Slots Busy|Duration|Grid Size' "$OUT/raw/ncu_$n.txt" | tr -s ' ' | sed "s/^/ncu $n:/" >> "$OUT/summary.txt"
}
prof bm64
prof bm128 --block_m=128
python3 - "$OUT"/raw/bench_*.jsonl <<'PY' | tee "$OUT/table.txt"
import json, sys, collections
v = collections.defaultdict(list)
for fn in sys.argv[1:]:
    arm = fn.rsplit("bench_", 1)[1][:-6]
    for l in open(fn):
        try: r = json.loads(l)
        except ValueError: continue
        if "kernel_ms" in r: v[(r["seq_len"], r["method"], arm)].append((r.get("tflops", 0), r["kernel_ms"], r.get("pairs"), r.get("recall")))
for k in sorted(v):
    x = v[k]
    print("%6d %-15s %-4s tflops %s  kernel_ms %s  pairs %s recall %s" % (k[0], k[1], k[2],
          " ".join("%.0f" % a[0] for a in x), " ".join("%.3f" % a[1] for a in x),
          sorted({a[2] for a in x}), sorted({a[3] for a in x})))
m = lambda k: sum(x[1] for x in v[k]) / len(v[k])
for (L, meth, arm) in sorted(v):
    if arm != "on": continue
    for o in ("off", "base"):
        if (L, meth, o) in v:
            print("%6d %-15s %s / on mean kernel ms %.4f (> 1: on faster)" % (L, meth, o, m((L, meth, o)) / m((L, meth, "on"))))
    if (L, meth, "base") in v and (L, meth, "off") in v:
        print("%6d %-15s base / off %.4f" % (L, meth, m((L, meth, "base")) / m((L, meth, "off"))))
PY
ab_finish
