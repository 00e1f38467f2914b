#!/usr/bin/env bash
# s38-sl: SPATTN_SL_EARLY_EST (the estimate enqueued before the host tables) 0 = main's order vs 1,
# the same binary (the knob selects main's path; main's binary left out of the bundle for the
# 64 MiB carry limit). One call, made by the lead at 01:50 UTC.
# Run as `OUT=$OUT bash .device/s38-sl/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-100}
ab_test build_index 60 bin/build_index_gpu_test --gtest_filter='*SampledLines*:*sampled_lines*'
BM="--block_m=128"
for r in 1 2; do
  AB_BENCH_FLAGS=$BM ab_bench early0_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_HOST_SPLIT=1 SPATTN_SL_EARLY_EST=0
  AB_BENCH_FLAGS=$BM ab_bench early1_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_HOST_SPLIT=1 SPATTN_SL_EARLY_EST=1
done
for r in 1 2; do
  AB_BENCH_FLAGS=$BM ab_bench early0 32768 7 16 sampled_lines SPATTN_SL_EARLY_EST=0
  AB_BENCH_FLAGS=$BM ab_bench early1 32768 7 16 sampled_lines SPATTN_SL_EARLY_EST=1
done
AB_BENCH_FLAGS=$BM ab_bench early0_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_HOST_SPLIT=1 SPATTN_SL_EARLY_EST=0
AB_BENCH_FLAGS=$BM ab_bench early1_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_HOST_SPLIT=1 SPATTN_SL_EARLY_EST=1
ab_finish
