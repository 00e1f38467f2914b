#!/usr/bin/env bash
# s40-saap run1: the Saap tests (this branch's build_index_gpu_test, HalfSlabsBuildTheSameIndex
# included), then Saap 32K (2 + 2 processes) and 128K (1 + 1) with the builder profile, the
# classifier's weights as whole 32 KB slabs (off: SPATTN_SAAP_CLS_HALF_SLABS=0, main's loop) and
# as a ring of 16 KB half slabs (on), one process per cell, alternating, one binary.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
export AB_BENCH_S=40
ab_test saap 80 bin/build_index_gpu_test --gtest_filter='*Saap*:*saap*'
grep -h "compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
for r in 1 2; do
  ab_bench off 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_HALF_SLABS=0
  ab_bench on  32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_HALF_SLABS=1
done
if [ "$SECONDS" -lt 135 ]; then
  ab_bench off 131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_HALF_SLABS=0
  ab_bench on  131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_HALF_SLABS=1
else
  ab_note "skipped the 128K pair"
fi
ab_finish
