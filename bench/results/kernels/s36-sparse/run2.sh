#!/usr/bin/env bash
# s36-sparse call 2: the pair step with ring slack recovered where the registers allow (v2): the
# producer's V two positions behind K in pair mode (K(u), V(u - 2)), each step's P V as two commit
# groups (the first tile's V slot released when its half is done), the pair's second V waited for
# after the step's S is issued. SparsePairStepMatchesDefault, then spattn-bench 32K, alternating
# main's binary (base) / this branch with the knob (pair2).
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test pair 60 bin/attention_cuda_test --gtest_filter='*SparsePairStep*'
grep -h "pair dynamic" "$OUT/raw/test_pair.log" | head -40 > "$OUT/pair_diffs.txt"
export AB_STOP_AFTER=60 AB_BENCH_S=30
for m in a_shape vertical_slash block_sparse a_shape; do
  ab_bench base 32768 7 16 $m
  ab_bench pair2 32768 7 16 $m SPATTN_HOPPER_PAIR_STEP=1
done
ab_finish
