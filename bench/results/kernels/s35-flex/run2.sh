#!/usr/bin/env bash
# s35-flex run 2: flex_prefill's decision in shared memory, the zeroed scratch in one memset, the
# CSR scan in one launch (SPATTN_FLEX_DECIDE_SMEM / SPATTN_FLEX_ZERO / SPATTN_FLEX_SCAN, default
# on; run 1's pooled keys on a second stream reverted) against main b18b37e's spattn-bench (base),
# same call, alternating processes; new_z0: the new binary with SPATTN_FLEX_ZERO=0.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test flex 60 bin/build_index_gpu_test --gtest_filter='*flex*:*Flex*:*PooledBuilders*'
grep -h "builds compared" "$OUT/raw/test_flex.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=100
for r in 1 2; do
  ab_bench base_p 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new_p 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1
done
ab_bench new_z0 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_ZERO=0
for r in 1 2; do
  ab_bench base 32768 7 16 flex_prefill
  ab_bench new 32768 7 16 flex_prefill
done
ab_bench base 131072 3 4 flex_prefill
ab_bench new 131072 3 4 flex_prefill
ab_finish
