#!/usr/bin/env bash
# s40-sparse call 2 (diagnostic): SPATTN_HOPPER_BM64_TWO_WG=2, the two-half CTA with no turns
# (each half's consumer runs free, as two CTAs an SM do), against main's path, one binary,
# alternating: 32K 2 + 2, 128K 1 + 1. Free ~ main: the turns (coupled item streams) cost; free ~
# ping-pong (call 1): the one-CTA structure / its spills cost.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-120}
M=a_shape,vertical_slash,block_sparse
for r in 1 2; do
  ab_bench off 32768 7 16 $M SPATTN_HOPPER_BM64_TWO_WG=0
  ab_bench pp 32768 7 16 $M SPATTN_HOPPER_BM64_TWO_WG=1
  ab_bench free 32768 7 16 $M SPATTN_HOPPER_BM64_TWO_WG=2
done
AB_BENCH_S=90 ab_bench free 131072 3 4 $M SPATTN_HOPPER_BM64_TWO_WG=2
AB_BENCH_S=90 ab_bench off 131072 3 4 $M SPATTN_HOPPER_BM64_TWO_WG=0
ab_finish
