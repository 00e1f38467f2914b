#!/usr/bin/env bash
# s23-sparse run 1 (on the GPU machine): the attention GPU tests of the sparse kernel (stale row
# maximum, gathered tiles' largest key, sleeping waits), again under PACK_TAILS=1; then
# cuda_bench in separate processes alternating base (main c3ec5f8) / new: 32K two rounds, 128K
# one; then ncu instruction counts of base and new on 32K ranges 0.03 / columns 0.05.
# Everything goes into run1.tar.xz plus summary.txt (the run tool returns at most 8 files).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s23sp1 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*'
timeout 70 bin/attention_cuda_test --gtest_filter="$F" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$F] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/tests.txt" | tee -a "$O/summary.txt"
F1='*Sparse*:*Columns*:*AShape*:-*PackTailsModes*'
SPATTN_HOPPER_PACK_TAILS=1 timeout 50 bin/attention_cuda_test --gtest_filter="$F1" > "$O/tests_pt1.txt" 2>&1
note "attention_cuda_test PACK_TAILS=1 [$F1] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_pt1.txt" | tr '\n' ' ')"
grep -hE "^\[ +FAILED " "$O/tests_pt1.txt" | tee -a "$O/summary.txt"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1 --col_densities=0.05"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --sampled_lines=0.95 --workspace_mb=4096"
C128="$C --seq_lens=131072 --iters=2 --warmup=1 --sampled_lines=0 --workspace_mb=4096"
run() {  # tag, timeout, args
  local tag=$1 to=$2; shift 2
  case $tag in
    base) timeout $to bin/base/cuda_bench "$@" --tag=$tag ;;
    new) timeout $to bin/cuda_bench "$@" --tag=$tag ;;
  esac >> "$O/bench.jsonl" 2>> "$O/errors.log"
  note "$tag rc=$?"
}
for r in 1 2; do for t in base new; do run $t 25 $C32; done; done
for t in base new; do run $t 45 $C128; done
kill $CLK 2>/dev/null
if command -v ncu > /dev/null; then
  # Launches (PersistentFa3Kernel only) in order: block_m 64 dense index, ranges 0.03, columns
  # 0.05; block_m 128 the same.
  for b in base new; do
    exe=bin/cuda_bench; [ $b = base ] && exe=bin/base/cuda_bench
    timeout 40 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-count 6 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg \
      $exe $C --seq_lens=32768 --sampled_lines=0 --iters=1 --warmup=0 --range_densities=0.03 \
      --workspace_mb=2048 > "$O/ncu_$b.txt" 2>&1
    note "ncu $b rc=$?"
  done
else
  note "no ncu"
fi
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
grep -hE "PersistTraits|gpu__time|inst_executed.sum" "$O"/ncu_*.txt 2>/dev/null | sed 's/(AttnParams.*//' | tee "$O/ncu_summary.txt" > /dev/null
cd "$WORK" && tar -cJf "${OUT:-/tmp/out}/run1.tar.xz" -C "$O" . && cp "$O/summary.txt" "$O/ncu_summary.txt" "${OUT:-/tmp/out}/" 2>/dev/null
