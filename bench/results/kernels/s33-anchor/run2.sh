#!/usr/bin/env bash
# s33-anchor run 2 (the committed code: the stripe scan by wgmma, the anchor pass main's): the
# anchor GPU tests (WgmmaStripeScanIsMainsScan as committed), then one profiled 32K process of
# new and of base (main 4fd85f9), new first; benches past 9 s are skipped (device share).
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test anchor 60 bin/build_index_gpu_test --gtest_filter='*anchor*:*Anchor*'
grep -h "stripe scan wgmma" "$OUT/raw/test_anchor.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=${AB_STOP_AFTER:-9}
ab_bench new 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1
ab_bench base 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1
ab_finish
