#!/usr/bin/env bash
# s38-sparse: the 128K decision for SPATTN_HOPPER_PAIR_STEP (the third V slot was not built).
# One binary: main d3254c9's spattn-bench (= d72beb3 code; knob already on main), travelling as
# spattn-bench and spattn-bench-base (same md5). Variant base = knob 0, pair = knob 1.
# Packed: cd /tmp/s38-sparse/pk (bazel-bin -> /work/main/bazel-bin) && DEST=/work/main/.device/s38-sparse
#   BASE=/tmp/s38-sparse/base kernels/cuda/bench/device_ab/pack.sh tests/bench/spattn-bench
# 128K, block_m 64 (default), methods block_sparse / a_shape / vertical_slash, 3 rounds, one
# process per cell, the order within a method alternating by round (off,on / on,off / off,on).
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=190
for r in 1 2 3; do
  for m in block_sparse a_shape vertical_slash; do
    if [ $((r % 2)) -eq 1 ]; then
      ab_bench base 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=0
      ab_bench pair 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
    else
      ab_bench pair 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=1
      ab_bench base 131072 3 4 $m SPATTN_HOPPER_PAIR_STEP=0
    fi
  done
done
ab_finish
