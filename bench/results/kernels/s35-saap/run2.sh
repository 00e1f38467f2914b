#!/usr/bin/env bash
# s35-saap run 2 (NOT RUN: my device share was spent): the test that decides cls_rope_table's
# default. Pack this branch's build_index_gpu_test with kernels/cuda/bench/device_ab/pack.sh, carry
# the folder, `timeout 120 bash .device/<name>/run2.sh`. RopeTablePerItemBuildsThePerHeadIndex
# builds main's path first in each pair: a fault on the first build is main's, on the second the
# table's. If it passes, set SaapKnobsT::cls_rope_table = true (saap_knobs.h).
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test rope 60 bin/build_index_gpu_test --gtest_filter='*RopeTable*'
grep -h "compared" "$OUT/raw/test_rope.log" | tee -a "$OUT/summary.txt"
ab_test saap 90 SPATTN_SAAP_CLS_ROPE_TABLE=1 bin/build_index_gpu_test --gtest_filter='*Saap*:*/saap'
grep -h "compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
ab_finish
