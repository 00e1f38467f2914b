#!/usr/bin/env bash
# s35-sa2 run 1: the wgmma one pass's slash split by predicated steps (SPATTN_SA_SPLIT, default
# on; =0 is main's path in the same binary).
#  1. build_index_gpu_test: the sample_attention cases + PredicatedSlashSplitBuildsMainsIndex.
#  2. spattn-bench sample_attention 32K, base (main c7f2171) vs new, one process per cell,
#     alternating: NP x3 each, PROFILE x3 each, new SPLIT=0 PROFILE x1; 128K NP once each.
#  3. (time left) SASS of the one pass, base vs new, by cuobjdump: instructions per kernel.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 60 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*'
grep -hE "indexes compared|rows differ|PASSED|FAILED" "$OUT/raw/test_sa.log" | tail -8 | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3; do
  ab_bench base 32768 7 16 $M $P
  ab_bench new 32768 7 16 $M $P
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
done
ab_bench newSplit0 32768 7 16 $M $P SPATTN_SA_SPLIT=0
ab_bench baseNP 131072 3 4 $M X=1
ab_bench newNP 131072 3 4 $M X=1
if [ "$SECONDS" -lt "${SASS_BEFORE:-70}" ] && command -v cuobjdump > /dev/null; then
  for b in spattn-bench-base spattn-bench; do
    timeout 12 cuobjdump -sass bin/$b 2>/dev/null | awk -v w="$OUT/sass_wg_$b.txt" '
      /Function : .*SaPassKernel/ {on=1; name=$0; n=0; wg=(name ~ /Lb1ELb1E/)}
      on && wg {print > w}
      on && /^[ \t]+\/\*[0-9a-f]+\*\// {n++}
      on && /\.\.\.\.\.\.\.\.\.\./ {print name, n; on=0}' > "$OUT/sass_count_$b.txt"
  done
  ab_note "sass dumped"
fi
ab_finish
