#!/usr/bin/env bash
# s36-est run 1 (one call): the estimate's one-wave span (SPATTN_EST_SPAN=0) and pass 3's next key
# tile prefetched into L1 (SPATTN_EST_K_PREFETCH 1 / 2) against main 2babfa1's spattn-bench
# (/work/main/bazel-bin); the new test and the estimate / twin tests; ncu of base's flex 32K
# estimate, select and merge kernels (stall reasons); the SASS of the estimate kernels.
# Packed by pack.sh into /work/main/.device/s36-est; run as `bash .device/s36-est/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-95}
(
  if command -v cuobjdump >/dev/null; then
    mkdir -p /tmp/sass && cd /tmp/sass && b=spattn-bench
    mkdir -p $b && (cd $b && timeout 60 cuobjdump -xelf all "$W/bin/$b" >/dev/null 2>&1)
    f=$(grep -l "EstimateKernel8" $b/*sm_90a* 2>/dev/null | head -1)
    [ -n "$f" ] && timeout 60 cuobjdump -sass "$f" | awk '/Function : /{p = /EstimateKernel(8|8Db|4Wg3)I13__nv_bfloat16Li128ELi[23]EL/} p' | xz -6 > "$OUT/sass_new.txt.xz"
  else
    echo "no cuobjdump" > "$OUT/sass_none.txt"
  fi
) > /tmp/sass.log 2>&1 &
ab_test est 60 bin/build_index_gpu_test \
  --gtest_filter='*EstimateOneWaveSpanAndKeyPrefetch*:*EstimateSpanAndKeyBuffers*:*EstimateTail*:*/vertical_slash:*/flex_prefill:*/sampled_lines'
grep -h "builds compared" "$OUT/raw/test_est.log" | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
for r in 1 2; do
  ab_bench base_flex 32768 7 16 flex_prefill $P
  ab_bench wave_flex 32768 7 16 flex_prefill $P SPATTN_EST_SPAN=0
  ab_bench pf2_flex 32768 7 16 flex_prefill $P SPATTN_EST_K_PREFETCH=2
  ab_bench wpf2_flex 32768 7 16 flex_prefill $P SPATTN_EST_SPAN=0 SPATTN_EST_K_PREFETCH=2
  ab_bench new_flex 32768 7 16 flex_prefill $P
  [ $r = 2 ] && ab_bench pf1_flex 32768 7 16 flex_prefill $P SPATTN_EST_K_PREFETCH=1
done
for r in 1 2; do
  ab_bench base_vs 32768 7 16 vertical_slash $P
  ab_bench pf2_vs 32768 7 16 vertical_slash $P SPATTN_EST_K_PREFETCH=2
done
AB_BENCH_FLAGS=--block_m=128 ab_bench base_sl 32768 7 16 sampled_lines $P
AB_BENCH_FLAGS=--block_m=128 ab_bench wpf2_sl 32768 7 16 sampled_lines $P SPATTN_EST_SPAN=0 SPATTN_EST_K_PREFETCH=2
# ncu of main's kernels (first build after two warm-up builds: 5 matches a flex build).
if [ "$SECONDS" -lt 80 ] && command -v ncu >/dev/null; then
  timeout 45 ncu --clock-control none -k regex:'EstimateKernel8|SelectFlexLines|MergeRows' \
    --launch-skip 10 --launch-count 5 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section SchedulerStats --section InstructionStats \
    bin/spattn-bench-base --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
    --dtype=bf16 --group_by=all --recall_rows=16 --warmup=2 --repeat=1 --seq_len=32768 \
    --methods=flex_prefill > "$OUT/ncu_base.txt" 2> "$OUT/raw/ncu_base.err"
  ab_note "ncu base rc=$?"
fi
ab_bench base_flex128k 131072 3 4 flex_prefill $P
ab_bench wpf2_flex128k 131072 3 4 flex_prefill $P SPATTN_EST_SPAN=0 SPATTN_EST_K_PREFETCH=2
wait
ab_finish
