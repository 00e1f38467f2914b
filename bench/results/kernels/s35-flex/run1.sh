#!/usr/bin/env bash
# s35-flex run 1: flex_prefill's decision in shared memory, pooled keys on a second stream, the
# CSR scan in one launch (SPATTN_FLEX_DECIDE_SMEM / SPATTN_FLEX_POOL_SIDE / SPATTN_FLEX_SCAN,
# default on) against main b18b37e's spattn-bench (base), same call, alternating processes.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test flex 100 bin/build_index_gpu_test --gtest_filter='*flex*:*Flex*:-*FlexSelectAndPool*'
grep -h "builds compared" "$OUT/raw/test_flex.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=190
for r in 1 2; do
  ab_bench base_p 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new_p 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1
done
for r in 1 2; do
  ab_bench base 32768 7 16 flex_prefill
  ab_bench new 32768 7 16 flex_prefill
done
ab_bench base 131072 3 4 flex_prefill
ab_bench new 131072 3 4 flex_prefill
ab_finish
