#!/usr/bin/env bash
# s41-sparse device call 2: does the block_m 64 stream's second CTA on an SM overlap the first's
# step, or do the two contend? SPATTN_HOPPER_DIAG_ONE_CTA=1 (diagnostic): one CTA an SM (24 KB of
# unused shared memory more, grid = SMs); with SPATTN_HOPPER_DIAG_NO_KV=2 also no range tile bytes
# (the lone consumer's own step). 32K off / one / one_kv x2, one process a cell, alternating.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-60}
M=dense,a_shape,vertical_slash,block_sparse
for r in 1 2; do
  ab_bench off 32768 7 16 $M SPATTN_HOPPER_DIAG_ONE_CTA=0
  ab_bench one 32768 7 16 $M SPATTN_HOPPER_DIAG_ONE_CTA=1
  ab_bench onekv 32768 7 16 $M SPATTN_HOPPER_DIAG_ONE_CTA=1 SPATTN_HOPPER_DIAG_NO_KV=2
done
ab_finish
