#!/usr/bin/env bash
# s38-flex3 run 1 (one call): the same-index tests (stored merge cuts vs recomputed, the balanced
# merge, the flex_prefill / vertical_slash tests), then flex_prefill + vertical_slash 32K with
# SPATTN_MERGE_STORE_CUTS=0 (off: the fill recomputes the cuts, main fc9f5ab's path) and =1 (on),
# one binary, alternating, 3 processes a variant (the third pair only if time is left), profiled;
# last, if time is left, an ncu of the two merge kernels (32K, flex_prefill, off vs on).
# Packed by pack.sh (no BASE) into /work/main/.device/s38-flex3; run as
# `bash .device/s38-flex3/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 120 bin/build_index_gpu_test \
  --gtest_filter='*BalancedMerge*:*StoreCuts*:*flex*:*Flex*:*vertical*:*Vertical*'
grep -h "builds compared" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=75
M=flex_prefill,vertical_slash
for r in 1 2 3; do
  ab_bench off 32768 7 16 $M SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_MERGE_STORE_CUTS=0
  ab_bench on 32768 7 16 $M SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_MERGE_STORE_CUTS=1
done
if [ "$SECONDS" -lt 75 ]; then
  B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=32768 --warmup=1 --repeat=1"
  for v in 0 1; do
    SPATTN_MERGE_STORE_CUTS=$v timeout 30 ncu --clock-control none -k regex:MergeRows --launch-skip 2 --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__thread_inst_executed_per_inst_executed.ratio \
      bin/spattn-bench $B --methods=flex_prefill > "$OUT/ncu_flex_store$v.txt" 2> "$OUT/raw/ncu_flex_store$v.err"
    ab_note "ncu flex_prefill store_cuts=$v rc=$?"
  done
fi
ab_finish
