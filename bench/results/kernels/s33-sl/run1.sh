#!/usr/bin/env bash
# s33-sl: sampled_lines' estimate on a second stream + one upload (SPATTN_SL_EST_STREAM,
# SPATTN_SL_ONE_UPLOAD) vs main 4fd85f9's spattn-bench, one call. Packed by pack.sh into
# /work/main/.device/s33-sl; run as `bash .device/s33-sl/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-125}
ab_test sampled_lines 40 bin/sampled_lines_gpu_test
ab_test build_index 80 bin/build_index_gpu_test --gtest_filter='*SampledLines*:*sampled_lines*'
BM="--block_m=128"
for r in 1 2 3; do
  AB_BENCH_FLAGS=$BM ab_bench base_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
  AB_BENCH_FLAGS=$BM ab_bench new_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
  AB_BENCH_FLAGS=$BM ab_bench base 32768 7 16 sampled_lines
  AB_BENCH_FLAGS=$BM ab_bench new 32768 7 16 sampled_lines
done
AB_BENCH_FLAGS=$BM ab_bench base_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
AB_BENCH_FLAGS=$BM ab_bench new_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
ab_bench base_guarded 32768 7 16 guarded
ab_bench new_guarded 32768 7 16 guarded
AB_BENCH_FLAGS=$BM ab_bench new_est0_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_EST_STREAM=0
AB_BENCH_FLAGS=$BM ab_bench new_est2_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_EST_STREAM=2
ab_finish
