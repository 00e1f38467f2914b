#!/usr/bin/env bash
# s36-sa run 1: sample_attention's one pass in one wave (SPATTN_SA_WAVE, default on; =0 is
# main's path in the same binary): Q by the SS wgmma from shared memory, 79 registers, 65 KB,
# three CTAs per SM.
#  1. build_index_gpu_test: the sample_attention cases + OneWaveSsPassBuildsMainsIndex.
#  2. SASS of the one pass from the build machine's cubins (base: main 2babfa1's file; new).
#  3. spattn-bench sample_attention 32K, base (main 2babfa1) vs new, one process per cell,
#     alternating: PROFILE x3 and NP x3 each; new WAVE=0 PROFILE + NP; 128K NP once each.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 60 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*'
grep -hE "indexes compared|rows differ|PASSED|FAILED" "$OUT/raw/test_sa.log" | tail -10 | tee -a "$OUT/summary.txt"
if command -v cuobjdump > /dev/null; then
  for c in base new; do
    timeout 20 cuobjdump -sass "$AB_DIR/$c.cubin" > "$OUT/raw/sass_$c.txt" 2>&1
    awk '/Function : / {if (name) print name, n; name=$3; n=0}
         /^[ \t]+\/\*[0-9a-f]+\*\// {n++} END {print name, n}' "$OUT/raw/sass_$c.txt" |
      grep SaPass > "$OUT/sass_count_$c.txt"
  done
  ab_note "sass dumped"
fi
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3; do
  ab_bench base 32768 7 16 $M $P
  ab_bench new 32768 7 16 $M $P
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
done
ab_bench newWave0 32768 7 16 $M $P SPATTN_SA_WAVE=0
ab_bench newWave0NP 32768 7 16 $M SPATTN_SA_WAVE=0
ab_bench baseNP 131072 3 4 $M X=1
ab_bench newNP 131072 3 4 $M X=1
ab_finish
