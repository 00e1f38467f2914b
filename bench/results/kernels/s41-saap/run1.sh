#!/usr/bin/env bash
# s41-saap run1: the Saap tests (this branch's build_index_gpu_test, TmaWeightRingBuildsTheSameIndex
# included), then Saap 32K and 128K with the builder profile, one process per cell, alternating,
# one binary: off (SPATTN_SAAP_CLS_TMA=0, main's slab loop), tma2 (=1: two 16 KB stages a
# warpgroup) and tma4 (=2: four 8 KB stages). 32K: off, tma4, tma2, off, tma4; 128K (if time is
# left): off and whichever TMA variant had the lower 32K classify median.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
export AB_BENCH_S=40 AB_STOP_AFTER=100
ab_test saap 45 bin/build_index_gpu_test --gtest_filter='*Saap*:*saap*'
grep -h "compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
# 2 + 2 for off and tma4, one tma2 process (the device share).
ab_bench off  32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=0
ab_bench tma4 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=2
ab_bench tma2 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=1
ab_bench off  32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=0
ab_bench tma4 32768 7 16 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=2
# Median classify ms of a variant's 32K builds (every process's first build left out).
med() {
  awk '/gpu builder saap:/ {k = 99; c = 99; for (i = 1; i < NF; ++i) {
         if ($i == "keys") k = $(i + 1); if ($i == "classify") c = $(i + 1) }
       if (k + 0 < 5) print c}' "$OUT/raw/bench_$1.err" | sort -g |
    awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print 99}'
}
m2=$(med tma2); m4=$(med tma4)
best=tma4; knob=2
if awk -v a="$m2" -v b="$m4" 'BEGIN {exit !(a < b)}'; then best=tma2; knob=1; fi
ab_note "32K classify medians: tma2 $m2 tma4 $m4 off $(med off); 128K: $best"
if [ "$SECONDS" -lt 100 ]; then
  export AB_STOP_AFTER=200
  ab_bench off   131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=0
  ab_bench $best 131072 3 4 saap SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SAAP_CLS_TMA=$knob
else
  ab_note "skipped the 128K pair"
fi
ab_finish
