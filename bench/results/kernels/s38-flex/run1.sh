#!/usr/bin/env bash
# s38-flex run 1 (one call): the same-index tests (the balanced merge lanes vs main's, and the
# flex_prefill / vertical_slash tests), then flex_prefill + vertical_slash 32K (3 processes a
# variant) and 128K (2 a variant, the second pair only if time is left) A/B, base (main d72beb3's spattn-bench) vs new, alternating,
# profiled; last, if time is left, an ncu of the two merge kernels (32K, both methods, base vs new).
# Packed by pack.sh into /work/main/.device/s38-flex; run as `bash .device/s38-flex/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 200 bin/build_index_gpu_test \
  --gtest_filter='*BalancedMerge*:*flex*:*Flex*:*vertical*:*Vertical*'
grep -h "builds compared" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=150
M=flex_prefill,vertical_slash
for r in 1 2 3; do
  ab_bench base 32768 7 16 $M SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench new 32768 7 16 $M SPATTN_GPU_BUILDER_PROFILE=1
done
ab_bench new_b0 32768 7 16 $M SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_MERGE_BALANCE=0
ab_bench base 131072 3 4 $M SPATTN_GPU_BUILDER_PROFILE=1
ab_bench new 131072 3 4 $M SPATTN_GPU_BUILDER_PROFILE=1
if [ "$SECONDS" -lt 110 ]; then
  B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=32768 --warmup=1 --repeat=1"
  for m in flex_prefill vertical_slash; do
    for v in base new; do
      bin=bin/spattn-bench; [ $v = base ] && bin=bin/spattn-bench-base
      timeout 40 ncu --clock-control none -k regex:MergeRows --launch-skip 2 --launch-count 2 \
        --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__thread_inst_executed_per_inst_executed.ratio \
        $bin $B --methods=$m > "$OUT/ncu_${m}_$v.txt" 2> "$OUT/raw/ncu_${m}_$v.err"
      ab_note "ncu $m $v rc=$?"
    done
  done
fi
ab_bench new 131072 3 4 $M SPATTN_GPU_BUILDER_PROFILE=1
ab_bench base 131072 3 4 $M SPATTN_GPU_BUILDER_PROFILE=1
ab_finish
