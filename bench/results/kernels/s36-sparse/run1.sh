#!/usr/bin/env bash
# s36-sparse call 1: SPATTN_HOPPER_PAIR_STEP=1 (block_m 64: two 64-key tiles of an item per
# consumer step, the K slots interleaved as one 128-key tile). attention_cuda_test's sparse cases
# (SparsePairStepMatchesDefault new; the others on the default path, whose producer now takes the
# K sub-tile stride as an argument), then spattn-bench, one process per cell, alternating: main's
# binary (base) against this branch with the knob on (pair); 32K x2 per method, one 128K cell each.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
ab_test sparse 150 bin/attention_cuda_test --gtest_filter='*Sparse*'
grep -h "pair dynamic" "$OUT/raw/test_sparse.log" | head -40 > "$OUT/pair_diffs.txt"
export AB_STOP_AFTER=200 AB_BENCH_S=40
for r in 1 2; do
  for m in a_shape block_sparse vertical_slash; do
    ab_bench base 32768 7 16 $m
    ab_bench pair 32768 7 16 $m SPATTN_HOPPER_PAIR_STEP=1
  done
done
for m in a_shape vertical_slash block_sparse; do
  ab_bench base128 131072 3 4 $m
  ab_bench pair128 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
done
kill $CLK 2>/dev/null
ab_finish
