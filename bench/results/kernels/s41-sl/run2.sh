#!/usr/bin/env bash
# s41-sl run 2 (one call, run 1's binary): the list in pass 3 alone (SPATTN_SL_TILE_LIST=2, the
# best cell of run 1) against main's walk (=0), alternating, 3 + 3 processes at 32K profiled, 1 + 1
# at 128K profiled, then 2 + 2 unprofiled at 32K if time is left.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=100
BM="--block_m=128"
for r in 1 2 3; do
  AB_BENCH_FLAGS=$BM ab_bench off 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=0
  AB_BENCH_FLAGS=$BM ab_bench p3 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=2
done
AB_BENCH_FLAGS=$BM ab_bench off128 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=0
AB_BENCH_FLAGS=$BM ab_bench p3_128 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_TILE_LIST=2
if [ "$SECONDS" -lt 60 ]; then
  for r in 1 2; do
    AB_BENCH_FLAGS=$BM ab_bench offnp 32768 7 16 sampled_lines SPATTN_SL_TILE_LIST=0
    AB_BENCH_FLAGS=$BM ab_bench p3np 32768 7 16 sampled_lines SPATTN_SL_TILE_LIST=2
  done
fi
ab_finish
