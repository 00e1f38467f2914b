#!/usr/bin/env bash
# s41-anchor run 1 (one call): first the verification of session 40's review mends
# (*nchor*:*UnrolledChains*:*SampleAttention*; *nchor* includes this branch's
# EarlyPassLaunchBuildsMainsIndex), then anchor with SPATTN_ANCHOR_EARLY=0 (main's lean build) and
# =1 (host tables reused per thread, the anchor pass launched before the stripe tables are built),
# one binary, alternating, one process per cell, profiled: 32K 4 + 4, 128K 1 + 1 (a 2nd 128K pair
# if time is left). The builder's "anchor host us" lines (entry -> pass launched / stripes launched
# / return) are summarized per variant. Packed by pack.sh (no BASE) into
# /work/main/.device/s41-anchor; run as `bash .device/s41-anchor/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 150 bin/build_index_gpu_test \
  --gtest_filter='*nchor*:*UnrolledChains*:*SampleAttention*'
grep -hE "^\[       OK \]|^\[  FAILED  \]" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
grep -hE "compared|pairs" "$OUT/raw/test_gpu.log" | grep -v "^\[" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=110 AB_BENCH_S=40
for r in 1 2 3 4; do
  ab_bench off 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=0
  ab_bench on 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=1
done
ab_bench off128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=0
ab_bench on128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=1
if [ "$SECONDS" -lt 80 ]; then
  ab_bench on128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=1
  ab_bench off128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_EARLY=0
fi
for v in off on off128 on128; do
  f="$OUT/raw/bench_$v.err"
  [ -e "$f" ] || continue
  grep -h "^anchor host us" "$f" | awk -v v="$v" '
    {p[NR]=$7; s[NR]=$9; r[NR]=$11}
    function med(a, n,   i, j, t) {
      for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) {t=a[i]; a[i]=a[j]; a[j]=t}
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { if (NR) printf "host us %-7s n %d: pass %.1f stripes %.1f return %.1f (medians)\n",
                         v, NR, med(p, NR), med(s, NR), med(r, NR) }' | tee -a "$OUT/summary.txt"
done
ab_finish
