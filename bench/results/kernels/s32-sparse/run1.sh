#!/usr/bin/env bash
# s32-sparse call 1 (this branch's binaries; SPATTN_HOPPER_EARLY_DESC=0 is main b50f02c's path):
#  ab32 / ab128: cuda_bench, one process each, knob sets ed1 (default: the next tile's descriptor
#    read under the current GEMMs) / ed0 (SPATTN_HOPPER_EARLY_DESC=0) / bn128 (dense kernel with
#    128-key tiles, SPATTN_HOPPER_CAUSAL_BN=128; its sparse lines = ed1), 2 interleaved rounds,
#    variants 5 (dense kernel, 176-key tiles) and 6 (the persistent dense kernel: the sparse
#    stream's ConsumerStream without the sparse parts), block_m 128.
#  ncu source counters (clocks unlocked) at 32K: the sparse kernel (dense index, ranges 0.03) with
#    ed1 and ed0, the dense kernel at 176 and 128 keys a tile, the persistent dense kernel.
#  attention_cuda_test: the new test, the sparse set (<= 4 processes at once).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s32sp1 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
B=bin/cuda_bench
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5,6 --sparse_variants=5 --index_stats=1 --block_ms=128"
KS="--knob_sets=ed1:;ed0:SPATTN_HOPPER_EARLY_DESC=0;bn128:SPATTN_HOPPER_CAUSAL_BN=128"
timeout 40 $B $C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab32 rc=$?"
KS2="--knob_sets=ed1:;ed0:SPATTN_HOPPER_EARLY_DESC=0"
timeout 45 $B $C --seq_lens=131072 --iters=2 --warmup=1 --workspace_mb=8192 --range_densities=0.03,0.1 --col_densities= --sampled_lines=0.95 --sparse_knobs=1 --rounds=2 "$KS2" --tag=ab128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab128 rc=$?"
kill $CLK 2>/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
note "ncu=$NCU"
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=1 --warmup=0 --col_densities= --sampled_lines=0 --workspace_mb=2048"
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section InstructionStats"
prof() {  # name env kernel-regex launches bench-args...
  local n=$1 e=$2 k=$3 l=$4; shift 4
  env $e timeout 30 $NCU --clock-control none -k regex:$k --launch-count $l $SEC -o "$WORK/$n" -f $B $S "$@" --tag=ncu > "$O/ncu_${n}_log.txt" 2>&1
  note "ncu $n rc=$?"
}
prof sp1 SPATTN_HOPPER_EARLY_DESC=1 PersistentFa3 2 --variants=5 --sparse_variants=5 --block_ms=128 --range_densities=0.03
prof sp0 SPATTN_HOPPER_EARLY_DESC=0 PersistentFa3 2 --variants=5 --sparse_variants=5 --block_ms=128 --range_densities=0.03
prof de176 SPATTN_HOPPER_CAUSAL_BN=176 DenseFa3Kernel 1 --variants=5 --sparse_variants= --block_ms= --range_densities=
prof de128 SPATTN_HOPPER_CAUSAL_BN=128 DenseFa3Kernel 1 --variants=5 --sparse_variants= --block_ms= --range_densities=
prof pd SPATTN_HOPPER_EARLY_DESC=1 PersistentFa3Kernel 1 --variants=6 --sparse_variants= --block_ms= --range_densities=
for r in sp1 sp0 de176 de128 pd; do
  [ -f "$WORK/$r.ncu-rep" ] || continue
  timeout 10 $NCU --import "$WORK/$r.ncu-rep" --print-details all > "$O/ncu_$r.txt" 2>&1
  timeout 15 $NCU --import "$WORK/$r.ncu-rep" --page source --csv --print-source sass > "$WORK/sass_$r.csv" 2>&1
  xz -4 -T4 -c "$WORK/sass_$r.csv" > "$O/sass_$r.csv.xz"
  note "sass $r $(wc -c < "$WORK/sass_$r.csv") bytes"
done
T=bin/attention_cuda_test
export TEST_TMPDIR=/tmp/spt && mkdir -p $TEST_TMPDIR
G1='*SparseEarlyDesc*:*LongContexts*'
G2='*SparseKernelWithDenseIndex*:*SparseTmaStore*:*Nan*:*Empty*:*HostPath*:*SparseRingChoice*'
G3='*Sparse*:*Columns*:*AShape*:*RandomRanges*'
timeout 70 $T --gtest_filter="$G1" > "$O/tests_d1.txt" 2>&1 &
P1=$!
timeout 70 $T --gtest_filter="$G2" > "$O/tests_d2.txt" 2>&1 &
P2=$!
timeout 70 $T --gtest_filter="$G3:-$G1:$G2" > "$O/tests_d3.txt" 2>&1 &
P3=$!
SPATTN_HOPPER_PACK_TAILS=1 timeout 70 $T --gtest_filter='*SparseEarlyDesc*:*SparsePackTailsModes*' > "$O/tests_p1.txt" 2>&1 &
P4=$!
wait $P1 $P2 $P3 $P4
note "tests: $(cat $O/tests_*.txt | grep -cE '^\[       OK \]') OK, $(cat $O/tests_*.txt | grep -cE '^\[  FAILED  \] [A-Z]') FAILED"
grep -hE "^\[ +(OK|FAILED) " "$O"/tests_*.txt | tee -a "$O/summary.txt"
tar -cJf "${OUT:-/tmp/out}/run1.tar.xz" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
