#!/usr/bin/env bash
# s36-sparse2 (NOT RUN: session 36's device budget was spent): the pair step's bytes independent
# of the work schedule (ConsumerStep::ExpRow<true>: each S half summed alone). Pack with
#   DEST=/work/main/.device/s36-sparse2 BASE=<main's binaries> kernels/cuda/bench/device_ab/pack.sh \
#     bazel-bin/kernels/cuda/attention_cuda_test bazel-bin/tests/bench/spattn-bench
# 1. The new test, then the two checks that failed in the combined run, with the pair step on in
#    every run (SparseTimelineTrace and SparsePairStepMatchesDefault excluded: they compare the
#    pair step against the 64-key step on purpose). 2. The sparse tests at the default (pair off).
# 3. spattn-bench 32K base (main) vs pair (knob on), alternating, 2 processes each; 128K x1.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sched 90 bin/attention_cuda_test --gtest_filter='*SparsePairStepBytesIndependentOfSchedule*'
ab_test pair_on 120 SPATTN_HOPPER_PAIR_STEP=1 bin/attention_cuda_test \
  --gtest_filter='*SparseDynamicWorkList*:*SparseTmaStore*'
ab_test sparse 180 bin/attention_cuda_test --gtest_filter='*Sparse*'
export AB_STOP_AFTER=300
for r in 1 2; do
  for m in a_shape block_sparse vertical_slash; do
    ab_bench base 32768 7 16 $m
    ab_bench pair 32768 7 16 $m SPATTN_HOPPER_PAIR_STEP=1
  done
done
for m in a_shape block_sparse; do
  ab_bench base 131072 3 4 $m
  ab_bench pair 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
done
ab_finish
