#!/usr/bin/env bash
# s37-sparse: s36-sparse2's pair-step schedule fix (ExpRow<true>: each S half summed alone).
# Packed with DEST=/work/main/.device/s37-sparse BASE=/tmp/s37-sparse/base (main 9043a11's
# spattn-bench) kernels/cuda/bench/device_ab/pack.sh tests/bench/spattn-bench kernels/cuda/attention_cuda_test
# 1. Pair step ON: every *Sparse* test but the two that compare it with the 64-key step on purpose
#    (includes SparsePairStepBytesIndependentOfSchedule, SparseDynamicWorkListMatchesSnakeOrder,
#    SparseTmaStoreMatchesStores, which failed with it on in session 36).
# 2. spattn-bench 32K base (main) vs pair (knob on), alternating, 2 processes a cell; 128K x1.
# 3. The whole attention_cuda_test at the default (pair off); 4. 128K second round if time is left.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test pair_on_sparse 90 SPATTN_HOPPER_PAIR_STEP=1 bin/attention_cuda_test \
  --gtest_filter='*Sparse*:-*SparseTimelineTrace*:*SparsePairStepMatchesDefault*'
export AB_STOP_AFTER=150
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
ab_test whole_default 110 bin/attention_cuda_test
export AB_STOP_AFTER=190
for m in a_shape block_sparse; do
  ab_bench pair 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
  ab_bench base 131072 3 4 $m
done
ab_finish
