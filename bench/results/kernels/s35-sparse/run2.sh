#!/usr/bin/env bash
# s35-sparse call 2: SPATTN_HOPPER_LEAD_WAITS=1 (block_m 64: the producer's K / V slot waits by
# warp 0 alone, the other producer warps at a named barrier). attention_cuda_test's new
# SparseLeadWaitsMatchesDefault, then spattn-bench at 32K, one process per cell, alternating:
# main's binary (base) against this branch with the knob on (lw); a_shape x2, block_sparse and
# vertical_slash x1 each; this branch with the knob off (off) once on a_shape.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
ab_test lw 40 bin/attention_cuda_test --gtest_filter='*SparseLeadWaits*'
export AB_STOP_AFTER=60 AB_BENCH_S=15
for r in 1 2; do
  ab_bench base 32768 7 16 a_shape
  ab_bench lw 32768 7 16 a_shape SPATTN_HOPPER_LEAD_WAITS=1
done
ab_bench off 32768 7 16 a_shape
for m in block_sparse vertical_slash; do
  ab_bench base 32768 7 16 $m
  ab_bench lw 32768 7 16 $m SPATTN_HOPPER_LEAD_WAITS=1
done
kill $CLK 2>/dev/null
ab_finish
