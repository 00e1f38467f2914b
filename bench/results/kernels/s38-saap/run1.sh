#!/usr/bin/env bash
# s38-saap run1: the Saap tests (this branch's build_index_gpu_test, RowsMassTemplated included),
# then Saap 32K and 128K A/B with the builder profile: base = main d72beb3's prebuilt spattn-bench,
# new = RowsMass templated on rows_per_block, 32 logits a group (default), new2 = 64 a group
# (SPATTN_SAAP_CLS_ROWS_MASS=2). One process per cell, alternating.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
export AB_BENCH_S=40
ab_test saap 60 bin/build_index_gpu_test --gtest_filter='*Saap*:*saap*'
grep -h "visited buckets compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
for r in 1 2; do
  ab_bench base 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new  32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1
  [ "$r" = 1 ] && ab_bench new2 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_ROWS_MASS=2
done
# The 128K pair only if both fit in the call's limit.
if [ "$SECONDS" -lt 115 ]; then
  ab_bench base 131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new  131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1
else
  ab_note "skipped the 128K pair"
fi
ab_finish
