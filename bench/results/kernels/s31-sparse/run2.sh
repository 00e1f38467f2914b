#!/usr/bin/env bash
# s31-sparse call 2: the kept pairing (PersistentFa3PickKernel<k2, v3>: 2 K + 2 V slots for long
# items, 2 K + 3 V for short ones). SparseRingChoiceMatchesEveryRing under the default and under
# SPATTN_HOPPER_PACK_TAILS=1 (two processes at once), then cuda_bench in one process at 32K
# block_m 128: knob sets auto (default) / k2 (SPATTN_HOPPER_SPARSE_RING=22) / v3 (23), 2
# interleaved rounds (ranges 0.03 / 0.1, columns 0.05, the dense index, sampled_lines); base
# (e30e6a9's binary) / new one process each.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s31sparse2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
export TEST_TMPDIR=/tmp/spt2 && mkdir -p $TEST_TMPDIR
timeout 40 bin/attention_cuda_test --gtest_filter='*SparseRingChoice*' > "$O/tests_d.txt" 2>&1 &
P1=$!
SPATTN_HOPPER_PACK_TAILS=1 timeout 40 bin/attention_cuda_test --gtest_filter='*SparseRingChoice*' > "$O/tests_p.txt" 2>&1 &
P2=$!
wait $P1 $P2
note "tests: $(cat $O/tests_*.txt | grep -cE '^\[       OK \]') OK, $(cat $O/tests_*.txt | grep -cE '^\[  FAILED  \] [A-Z]') FAILED"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95"
KS="--knob_sets=auto:;k2:SPATTN_HOPPER_SPARSE_RING=22;v3:SPATTN_HOPPER_SPARSE_RING=23"
timeout 40 bin/cuda_bench $C32 --block_ms=128 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab32 rc=$?"
timeout 30 bin/base/cuda_bench $C32 --block_ms=128 --tag=base >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "base32 rc=$?"
timeout 30 bin/cuda_bench $C32 --block_ms=128 --tag=new >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "new32 rc=$?"
grep -hE "^\[ +(OK|FAILED) " "$O"/tests_*.txt | tee -a "$O/summary.txt"
tar -cJf "${OUT:-/tmp/out}/run2.tar.xz" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
