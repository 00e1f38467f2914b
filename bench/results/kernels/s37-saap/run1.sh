#!/usr/bin/env bash
# s37-saap run1: Saap 32K (2 processes per variant, alternating) and 128K (one each), base = main
# 9043a11, new = RowsMass deep loads (default on); builder profile on; then the Saap tests.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$OUT/summary.txt"
for r in 1 2; do
  ab_bench base 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new  32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1
done
ab_bench base 131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1
ab_bench new  131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1
ab_test saap_tests 150 bin/build_index_gpu_test --gtest_filter='*Saap*:*saap*'
ab_finish
