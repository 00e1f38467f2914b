#!/usr/bin/env bash
# s39-anchor run 1 (one call): the anchor same-index tests (*nchor*: SsQAnchorPassIsMainsPass, the
# wgmma / stripe tests), then anchor 32K with SPATTN_ANCHOR_SS_Q=0 (main's AnAnchorWgKernel) and
# =1 (AnAnchorWgSsKernel: Q by descriptor), one binary, alternating, 2 processes a variant,
# profiled; 128K one each; if time is left an ncu of the anchor pass kernel (32K, off vs on).
# Packed by pack.sh (no BASE) into /work/main/.device/s39-anchor; run as
# `bash .device/s39-anchor/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test gpu 100 bin/build_index_gpu_test --gtest_filter='*nchor*'
grep -hE "compared" "$OUT/raw/test_gpu.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=105
for r in 1 2; do
  ab_bench off 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_SS_Q=0
  ab_bench on 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_SS_Q=1
done
ab_bench off128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_SS_Q=0
ab_bench on128 131072 3 4 anchor SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_ANCHOR_SS_Q=1
if [ "$SECONDS" -lt 110 ]; then
  B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=32768 --warmup=1 --repeat=1"
  for v in 0 1; do
    SPATTN_ANCHOR_SS_Q=$v timeout 30 ncu --clock-control none -k regex:AnAnchorWg --launch-skip 2 --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
      bin/spattn-bench $B --methods=anchor > "$OUT/ncu_anchor$v.txt" 2> "$OUT/raw/ncu_anchor$v.err"
    ab_note "ncu anchor pass ss_q=$v rc=$?"
  done
fi
ab_finish
