#!/usr/bin/env bash
# s28-sparse call 2: the L2 prefetches (SPATTN_HOPPER_L2_PREFETCH, default 7 in this build).
# Tests (the new one first as a smoke test; then the attention GPU tests and, at the same time,
# under PACK_TAILS=1); A/B in one process at 32K (p7 default / p0 none / p3 tiles + Q without its first tile,
# two interleaved rounds); base (main 4fe01c0) / new in separate processes at 32K and 128K
# (block_m 128; one pair each); ncu L2 hit rate of 32K block_m 128 ranges 0.069, new p7 vs p0; the
# timeline of p7 / p0 at 32K block_m 128.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s28sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cp sparse_timeline.py "$WORK/"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR" /tmp/spattn_test1
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
finish() {
  kill $CLK 2>/dev/null
  tar -cf "${OUT:-/tmp/out}/run2.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/" 2>/dev/null
  cp "$O/timeline.txt" "${OUT:-/tmp/out}/" 2>/dev/null
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
timeout 40 bin/attention_cuda_test --gtest_filter='*SparseL2Prefetch*' > "$O/smoke.txt" 2>&1
rc=$?
note "smoke SparseL2PrefetchMatchesNone rc=$rc $(grep -hE '^\[  (PASSED|FAILED) ' "$O/smoke.txt" | tr '\n' ' ')"
if [ $rc -ne 0 ]; then tail -30 "$O/smoke.txt"; finish; exit 1; fi
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*:-*SparseL2Prefetch*'
F1='*Sparse*:*Columns*:*AShape*:-*PackTailsModes*'
TEST_TMPDIR=/tmp/spattn_test1 SPATTN_HOPPER_PACK_TAILS=1 timeout 80 bin/attention_cuda_test --gtest_filter="$F1" > "$O/tests_pt1.txt" 2>&1 &
PT=$!
timeout 80 bin/attention_cuda_test --gtest_filter="$F" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$F] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
wait $PT
note "attention_cuda_test PACK_TAILS=1 [$F1] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_pt1.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/smoke.txt" "$O/tests.txt" "$O/tests_pt1.txt" | tee -a "$O/summary.txt"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096"
C128="$C --seq_lens=131072 --iters=2 --warmup=1 --workspace_mb=8192"
KS="--knob_sets=p7:;p0:SPATTN_HOPPER_L2_PREFETCH=0;p3:SPATTN_HOPPER_L2_PREFETCH=3"
timeout 50 bin/cuda_bench $C32 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab 32K rc=$?"
run() {  # tag, timeout, args
  local tag=$1 to=$2; shift 2
  case $tag in
    base) timeout $to bin/base/cuda_bench "$@" --tag=$tag ;;
    new) timeout $to bin/cuda_bench "$@" --tag=$tag ;;
  esac >> "$O/bench.jsonl" 2>> "$O/errors.log"
  note "$tag rc=$?"
}
for t in base new; do run $t 25 $C32; done
for t in base new; do run $t 45 $C128 --block_ms=128; done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  MET="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
  for pf in 7 0; do
    echo "=== new L2_PREFETCH=$pf" >> "$O/ncu.txt"
    SPATTN_HOPPER_L2_PREFETCH=$pf timeout 40 "$NCU" --clock-control base --metrics "$MET" -k regex:PersistentFa3Kernel --launch-skip 2 --launch-count 4 \
      bin/cuda_bench --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=128 --col_densities= \
      --seq_lens=32768 --range_densities=0.03,0.1 --iters=1 --warmup=1 --tag=ncu$pf >> "$O/ncu.txt" 2>&1
    note "ncu pf=$pf rc=$?"
  done
  grep -E "^===|gpu__time|lts__|dram__|cycles_elapsed" "$O/ncu.txt" | tee -a "$O/summary.txt"
fi
T=$O/trace.jsonl
timeout 30 bin/cuda_bench $C32 --block_ms=128 --col_densities= --sampled_lines=0 --sparse_knobs=1 --range_densities=0.03 "--knob_sets=p7:SPATTN_HOPPER_TRACE=$T;p0:SPATTN_HOPPER_L2_PREFETCH=0+SPATTN_HOPPER_TRACE=$T" --tag=tl >> "$O/timeline_bench.jsonl" 2>> "$O/errors.log"
note "timeline rc=$? $(wc -c < "$T") bytes"
python3 sparse_timeline.py "$T" > "$O/timeline.txt" 2>> "$O/errors.log"
rm -f "$T"
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if r["kernel"] == "index_stats": continue
        R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
finish
