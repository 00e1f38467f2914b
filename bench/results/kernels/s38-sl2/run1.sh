#!/usr/bin/env bash
# s38-sl2: SPATTN_SL_PAIR_SCAN (the assembler's two offset scans in one launch) 0 = main's two
# launches vs 1, the same binary (the knob selects main's path). NOT RUN (no device slot left).
# Pack: DEST=/work/main/.device/s38-sl2 kernels/cuda/bench/device_ab/pack.sh \
#   tests/bench/spattn-bench kernels/cuda/build_index_gpu_test
# Run as `OUT=$OUT bash .device/s38-sl2/run1.sh` (carry [".device/s38-sl2"]); ~60-90 s.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-100}
ab_test build_index 60 bin/build_index_gpu_test --gtest_filter='*SampledLines*:*sampled_lines*'
BM="--block_m=128"
for r in 1 2 3; do
  AB_BENCH_FLAGS=$BM ab_bench pair0 32768 7 16 sampled_lines SPATTN_SL_PAIR_SCAN=0
  AB_BENCH_FLAGS=$BM ab_bench pair1 32768 7 16 sampled_lines SPATTN_SL_PAIR_SCAN=1
done
AB_BENCH_FLAGS=$BM ab_bench pair0_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_PAIR_SCAN=0
AB_BENCH_FLAGS=$BM ab_bench pair1_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_PAIR_SCAN=1
ab_finish
