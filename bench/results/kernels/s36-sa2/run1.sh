#!/usr/bin/env bash
# s36-sa2 run 1: the one-wave SS pass's per-tile trims (SPATTN_SA_HOIST: unset = 2, the
# descriptors once a tile + the split's key test relative to the tile + the slash quad sums
# skipped where no row of the warp finishes a block; 1 the first two only; 0 s36-sa's wave
# kernel = base's pass).
#  1. build_index_gpu_test: the sample_attention cases + HoistedSsPassBuildsTheWaveIndex.
#  2. spattn-bench sample_attention 32K, base (main 7489294) vs new, one process per cell,
#     alternating: PROFILE x3 and NP x3 each, new HOIST=1 PROFILE x2; 128K NP once (new).
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 40 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*'
grep -hE "indexes compared|rows differ|PASSED|FAILED" "$OUT/raw/test_sa.log" | tail -12 | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3; do
  ab_bench base 32768 7 16 $M $P
  ab_bench new 32768 7 16 $M $P
  [ $r -lt 3 ] && ab_bench newHoist1 32768 7 16 $M $P SPATTN_SA_HOIST=1
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
done
ab_bench newNP 131072 3 4 $M X=1
ab_finish
