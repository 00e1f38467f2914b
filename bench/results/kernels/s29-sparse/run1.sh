#!/usr/bin/env bash
# s29-sparse call 1: the sparse stream's 160-key range tiles (SPATTN_HOPPER_SPARSE_BN, default 160
# in this build; 128 = main's tiles). Tests: the new SparseRangeTiles160MatchReference first (smoke),
# then the attention GPU tests of the sparse kernel and, at the same time, under PACK_TAILS=1;
# A/B in one process at 32K (b160 default / b128 / b160 with PACK_TAILS=1 / =0, two interleaved
# rounds); base (main 0685884) / new in separate processes at 32K and 128K, block_m 64 and 128.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s29sp1 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR" /tmp/spattn_test1
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
finish() {
  kill $CLK 2>/dev/null
  tar -cf "${OUT:-/tmp/out}/run1.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/" 2>/dev/null
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
timeout 60 bin/attention_cuda_test --gtest_filter='*SparseRangeTiles160*' > "$O/smoke.txt" 2>&1
rc=$?
note "smoke SparseRangeTiles160MatchReference rc=$rc $(grep -hE '^\[  (PASSED|FAILED) ' "$O/smoke.txt" | tr '\n' ' ')"
if [ $rc -ne 0 ]; then tail -40 "$O/smoke.txt"; finish; exit 1; fi
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*:-*SparseRangeTiles160*'
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
KS="--knob_sets=b160:;b128:SPATTN_HOPPER_SPARSE_BN=128;p1:SPATTN_HOPPER_PACK_TAILS=1;p0:SPATTN_HOPPER_PACK_TAILS=0"
timeout 60 bin/cuda_bench $C32 --block_ms=128 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab >> "$O/bench.jsonl" 2>> "$O/errors.log"
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
for t in base new; do run $t 45 $C128; done
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if r["kernel"] == "index_stats": continue
        t = r["tag"]
        R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][t].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
finish
