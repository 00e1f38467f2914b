#!/usr/bin/env bash
# s41-sl run 1 (one call): the tile-list same-index test (SPATTN_SL_TILE_LIST 1 / 2 / 3 vs 0), the
# CPU-twin tests with lists in both passes, the occupancy test; then sampled_lines bm128 with
# SPATTN_SL_TILE_LIST=0 (main's walk) and =3 (lists in passes 2 and 3), one binary, alternating,
# 3 + 3 processes at 32K and 1 + 1 at 128K, profiled; single 32K cells with the list in one pass
# only if time is left. Packed by pack.sh (no BASE) into /work/main/.device/s41-sl; run as
# `bash .device/s41-sl/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test tilelist 60 bin/build_index_gpu_test --gtest_filter='*TileList*'
grep -hE "tile lists vs" "$OUT/raw/test_tilelist.log" | tee -a "$OUT/summary.txt"
ab_test twins_list3 60 SPATTN_SL_TILE_LIST=3 bin/build_index_gpu_test \
  --gtest_filter='*MatchesCpuTwin/sampled_lines:*LongWorkloadKeepsCpuFidelity/sampled_lines:*SampledLinesBucketsEntriesBySegment'
ab_test sl_gpu 30 bin/sampled_lines_gpu_test
export AB_STOP_AFTER=150
BM="--block_m=128"
for r in 1 2 3; do
  AB_BENCH_FLAGS=$BM ab_bench off 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=0
  AB_BENCH_FLAGS=$BM ab_bench on 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=3
done
AB_BENCH_FLAGS=$BM ab_bench off128 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=0
AB_BENCH_FLAGS=$BM ab_bench on128 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=3
if [ "$SECONDS" -lt 130 ]; then
  AB_BENCH_FLAGS=$BM ab_bench p2only 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=1
  AB_BENCH_FLAGS=$BM ab_bench p3only 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=2
fi
ab_finish
