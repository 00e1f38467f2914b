#!/usr/bin/env bash
# s40-flex run 1 (one call): the same-index test of pass 3's unrolled chains (SPATTN_EST_CHAIN=1,
# the branch's default) against main's loops (=0) and the non-finite tail test; then flex_prefill
# 32K chain 0 / 1 alternating (2 + 2 processes) and 128K (1 + 1), profiled; then the rest of
# `*flex*:*Flex*:*Estimate*`; if time is left, an ncu of pass 3 (EstimateKernel8, 32K) off vs on
# and the SASS instruction counts of both pass 3 kernels. Packed by pack.sh (no BASE) into
# /work/main/.device/s40-flex; run as `OUT=$OUT bash .device/s40-flex/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test chain 60 bin/build_index_gpu_test \
  --gtest_filter='*UnrolledChainsBuildMainsIndex*:*EstimateTailKeepsNonFiniteLogitsIndex*'
grep -h "builds compared" "$OUT/raw/test_chain.log" | tee -a "$OUT/summary.txt"
export AB_STOP_AFTER=130
for r in 1 2; do
  ab_bench off 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_EST_CHAIN=0
  ab_bench on 32768 7 16 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_EST_CHAIN=1
done
ab_bench off128 131072 3 4 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_EST_CHAIN=0
ab_bench on128 131072 3 4 flex_prefill SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_EST_CHAIN=1
ab_test flex 100 bin/build_index_gpu_test \
  --gtest_filter='*flex*:*Flex*:*Estimate*:-*UnrolledChainsBuildMainsIndex*:*EstimateTailKeepsNonFiniteLogitsIndex*'
grep -h "builds compared" "$OUT/raw/test_flex.log" | tail -40 >> "$OUT/raw/flex_counts.txt"
if [ "$SECONDS" -lt 150 ]; then
  B="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=32768 --warmup=1 --repeat=1"
  for v in 0 1; do
    SPATTN_EST_CHAIN=$v timeout 25 ncu --clock-control none -k 'regex:EstimateKernel8[^D]' --launch-skip 0 --launch-count 1 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio \
      bin/spattn-bench $B --methods=flex_prefill > "$OUT/ncu_pass3_chain$v.txt" 2> "$OUT/raw/ncu_pass3_chain$v.err"
    ab_note "ncu pass 3 chain=$v rc=$?"
  done
fi
if command -v cuobjdump > /dev/null && [ "$SECONDS" -lt 165 ]; then
  timeout 20 cuobjdump -sass bin/spattn-bench 2> /dev/null | awk '/Function : .*EstimateKernel8I13__nv_bfloat16Li128ELi3ELb1ELb0ELb0ELb1E/{f=$0; n=0; next} /Function :/{if (f!="") print n, f; f=""} f!="" && /^ +\/\*[0-9a-f]+\*\//{n++} END{if (f!="") print n, f}' > "$OUT/sass_pass3_counts.txt"
  ab_note "sass counts rc=$?"
fi
ab_finish
