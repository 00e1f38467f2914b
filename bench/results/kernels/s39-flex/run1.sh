#!/usr/bin/env bash
# s39-flex run 1 (one call): the same-index tests (the select on a 2-CTA cluster vs one CTA, the
# other flex / merge tests), then flex_prefill 32K with SPATTN_FLEX_SEL_CLUSTER=0 (one 1,024-thread
# CTA a list: main's path) and =1 (a cluster of 2 x 512), one binary, alternating, 2 processes a
# variant, profiled; 128K one each; if time is left an ncu of the select kernel (32K, off vs on)
# and a third 32K pair. Packed by pack.sh (no BASE) into /work/main/.device/s39-flex; run as
# `bash .device/s39-flex/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 150 bin/build_index_gpu_test \
  --gtest_filter='*ClusterFlexSelect*:*flex*:*Flex*:*BalancedMerge*:*StoreCuts*'
grep -h "builds compared" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=110
for r in 1 2; do
  ab_bench off 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=0
  ab_bench on 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=1
done
ab_bench off128 131072 3 4 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=0
ab_bench on128 131072 3 4 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=1
if [ "$SECONDS" -lt 100 ]; then
  B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=32768 --warmup=1 --repeat=1"
  for v in 0 1; do
    SPATTN_FLEX_SEL_CLUSTER=$v timeout 30 ncu --clock-control none -k regex:SelectFlexLines --launch-skip 2 --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size,launch__block_size \
      bin/spattn-bench $B --methods=flex_prefill > "$OUT/ncu_select$v.txt" 2> "$OUT/raw/ncu_select$v.err"
    ab_note "ncu flex_prefill select cluster=$v rc=$?"
  done
fi
if [ "$SECONDS" -lt 110 ]; then
  ab_bench off 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=0
  ab_bench on 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_FLEX_SEL_CLUSTER=1
fi
ab_finish
