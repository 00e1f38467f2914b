#!/usr/bin/env bash
# s38-sparse run 2 (NOT run: the helper's share went to run 1): the pair step with 3 V slots
# (SPATTN_HOPPER_PAIR_STEP=2). Pack from the s38-sparse worktree:
#   DEST=/work/main/.device/s38-sparse BASE=/tmp/s38-sparse/base \
#     kernels/cuda/bench/device_ab/pack.sh tests/bench/spattn-bench kernels/cuda/attention_cuda_test
# (BASE: main d3254c9's spattn-bench.) base = main's binary with PAIR_STEP=1 (the 2-V pair step,
# whose .text the branch leaves byte-identical), pair3v = this branch's with PAIR_STEP=2.
# ~150 s warm. Look for "spattn: SPATTN_HOPPER_PAIR_STEP=2: ... 3 V slots" in the logs: "too few"
# means the 3-V kernel did not fit two CTAs an SM and the 2-V step ran instead.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test three_v 90 bin/attention_cuda_test --gtest_filter='*SparsePairStepThreeVSlotsMatchesTwo*'
grep -h "PAIR_STEP=2" "$OUT/raw/test_three_v.log" | head -2 | tee -a "$OUT/summary.txt"
ab_test sparse_3v 90 SPATTN_HOPPER_PAIR_STEP=2 bin/attention_cuda_test \
  --gtest_filter='*Sparse*:-*SparseTimelineTrace*:*SparsePairStepMatchesDefault*'
ab_test whole_default 120 bin/attention_cuda_test
export AB_STOP_AFTER=300
for r in 1 2; do
  for m in a_shape block_sparse vertical_slash; do
    ab_bench base 32768 7 16 $m SPATTN_HOPPER_PAIR_STEP=1
    ab_bench pair3v 32768 7 16 $m SPATTN_HOPPER_PAIR_STEP=2
  done
done
for m in block_sparse a_shape vertical_slash; do
  ab_bench pair3v 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=2
  ab_bench base 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
done
grep -h "PAIR_STEP=2" "$OUT"/raw/bench_pair3v.err | sort | uniq -c | tee -a "$OUT/summary.txt"
ab_finish
