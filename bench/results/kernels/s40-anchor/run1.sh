#!/usr/bin/env bash
# s40-anchor run 1 (one call): the anchor same-index tests (*nchor*, incl. LeanBuildIsMainsBuild),
# then anchor 32K with SPATTN_ANCHOR_LEAN=0 (main's launch sequence) and =1 (the bitmap memset
# folded into the anchor pass, pinned uploads, one scan launch, mapped totals, smem limits set
# once), one binary, alternating, 3 processes a variant (a 4th pair if time is left), profiled;
# 128K one each. Packed by pack.sh (no BASE) into /work/main/.device/s40-anchor; run as
# `bash .device/s40-anchor/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 90 bin/build_index_gpu_test --gtest_filter='*nchor*'
grep -hE "compared" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=95
for r in 1 2 3; do
  ab_bench off 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=0
  ab_bench on 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=1
done
ab_bench off128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=0
ab_bench on128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=1
if [ "$SECONDS" -lt 60 ]; then
  ab_bench off 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=0
  ab_bench on 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_LEAN=1
fi
ab_finish
