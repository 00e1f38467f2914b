#!/usr/bin/env bash
# s40-sparse device call: the two-warpgroup block_m 64 CTA (SPATTN_HOPPER_BM64_TWO_WG) — its test
# and the pair-step tests, then the A/B off / on in one binary, one process a cell, alternating:
# 32K 2 + 2, 128K 1 + 1; dense + a_shape / vertical_slash / block_sparse (block_m 64) a process.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-175}
ab_test pair 100 bin/attention_cuda_test --gtest_filter='*PairStep*:*TwoWarpgroups*'
M=dense,a_shape,vertical_slash,block_sparse
# (a hung kernel in the test: no "on" cells)
if grep -q "rc=124" "$OUT/summary.txt"; then ON=0; else ON=1; fi
for r in 1 2; do
  ab_bench off 32768 7 16 $M SPATTN_HOPPER_BM64_TWO_WG=0
  [ $ON = 1 ] && ab_bench on 32768 7 16 $M SPATTN_HOPPER_BM64_TWO_WG=1
done
[ $ON = 1 ] && AB_BENCH_S=90 ab_bench on 131072 3 4 $M SPATTN_HOPPER_BM64_TWO_WG=1
AB_BENCH_S=90 ab_bench off 131072 3 4 $M SPATTN_HOPPER_BM64_TWO_WG=0
ab_finish
