#!/usr/bin/env bash
# s37-flex run 1 (one call, main 9043a11's spattn-bench only): ncu of flex_prefill 32K's estimate
# passes 2-3 (EstimateKernel8), the line selection (SelectFlexLinesKernel) and the merge
# (MergeRows) with stall reasons, then one profiled 32K build for the stage times.
# Packed by pack.sh into /work/main/.device/s37-flex; run as `bash .device/s37-flex/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 --seq_len=32768 --methods=flex_prefill"
# 5 matches a flex build (est pass 2, pass 3, select, merge count, merge fill): skip the 2 warm-ups.
timeout 75 ncu --clock-control none -k regex:'EstimateKernel8|SelectFlexLines|MergeRows' \
  --launch-skip 10 --launch-count 5 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section LaunchStats --section SchedulerStats --section InstructionStats \
  --section MemoryWorkloadAnalysis \
  bin/spattn-bench $B --warmup=2 --repeat=1 > "$OUT/ncu_main.txt" 2> "$OUT/raw/ncu_main.err"
ab_note "ncu main rc=$?"
ab_bench main_flex 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1
ab_finish
