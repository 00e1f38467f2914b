#!/usr/bin/env bash
# s33-sa run 1: sample_attention's count kernel by the whole warp (record + register sort), the
# totals in pinned host words, the bitmap fill launch skipped (SPATTN_SA_LEAN unset; =2: s32-sa's
# lean launches, =0: main's, in the same binary).
#  1. build_index_gpu_test: the sample_attention cases + WarpRecordAndRegisterSortBuildMainsIndex.
#  2. spattn-bench sample_attention 32K, base (main 4fd85f9) vs new, one process per cell,
#     alternating: NP (no profile) x3 each, PROFILE x3 each, new SPATTN_SA_LEAN=2 PROFILE x2;
#     128K NP once each.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 60 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*:*Assembl*'
grep -hE "indexes compared|rows differ" "$OUT/raw/test_sa.log" | tail -8 | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3; do
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
  ab_bench base 32768 7 16 $M $P
  ab_bench new 32768 7 16 $M $P
  [ $r -le 2 ] && ab_bench new2 32768 7 16 $M $P SPATTN_SA_LEAN=2
done
ab_bench baseNP 131072 3 4 $M X=1
ab_bench newNP 131072 3 4 $M X=1
ab_finish
