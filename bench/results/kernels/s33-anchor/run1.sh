#!/usr/bin/env bash
# s33-anchor run 1 (kernels/cuda/bench/device_ab): the anchor GPU tests, then anchor 32K / 128K,
# base = main 4fd85f9's spattn-bench, new = this branch (defaults: SPATTN_ANCHOR_WG4=1, the anchor
# pass on four warpgroups / 128-key tiles; SPATTN_ANCHOR_STRIPE_WG=1, the stripe scan by wgmma);
# newA = the anchor pass only (stripe by mma.sync), newS = the stripe only. P = with
# SPATTN_GPU_BUILDER_PROFILE=1 (stage table), NP = without. One process per cell, alternating.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test anchor 150 bin/build_index_gpu_test --gtest_filter='*anchor*:*Anchor*'
export AB_STOP_AFTER=${AB_STOP_AFTER:-150}
P=SPATTN_GPU_BUILDER_PROFILE=1
for r in 1 2 3; do
  ab_bench base 32768 7 16 anchor $P
  ab_bench new 32768 7 16 anchor $P
  ab_bench baseNP 32768 7 16 anchor
  ab_bench newNP 32768 7 16 anchor
done
ab_bench newA 32768 7 16 anchor $P SPATTN_ANCHOR_STRIPE_WG=0
ab_bench newS 32768 7 16 anchor $P SPATTN_ANCHOR_WG4=0
ab_bench base 131072 3 4 anchor $P
ab_bench new 131072 3 4 anchor $P
ab_finish
