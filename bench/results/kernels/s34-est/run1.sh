#!/usr/bin/env bash
# s34-est run 1: the fast estimate's per-element tail (SPATTN_EST_TAIL: 0 main's kernels, 1 the
# clamp + pitch 67 (this binary's default), 2 also balanced diagonal pairs) against main 935fe86's
# binaries (/work/main/bazel-bin, same sm_90a .text as 384f218), one call. Packed by pack.sh into
# /work/main/.device/s34-est; run as `bash .device/s34-est/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-110}
# The SASS of the pass 2 / 3 kernels (for instruction counts), beside the tests.
(
  if command -v cuobjdump >/dev/null; then
    mkdir -p /tmp/sass && cd /tmp/sass && for b in spattn-bench spattn-bench-base; do
      mkdir -p $b && (cd $b && timeout 60 cuobjdump -xelf all "$W/bin/$b" >/dev/null 2>&1)
      f=$(grep -l "EstimateKernel8" $b/*sm_90a* 2>/dev/null | head -1)
      [ -n "$f" ] && timeout 60 cuobjdump -sass "$f" | awk '/Function : /{p = /EstimateKernel(8|8Db|4|4Wg3)I13__nv_bfloat16Li128EL/} p' | xz -6 > "$OUT/sass_$b.txt.xz"
    done
  else
    echo "no cuobjdump" > "$OUT/sass_none.txt"
  fi
) > /tmp/sass.log 2>&1 &
ab_test build_index 100 bin/build_index_gpu_test \
  --gtest_filter='*Estimate*:*/vertical_slash:*/flex_prefill:*SampledLines*:*sampled_lines*'
grep -h "builds compared\|same index" "$OUT/raw/test_build_index.log" | tee -a "$OUT/summary.txt"
ab_test sampled_lines 40 bin/sampled_lines_gpu_test
P=SPATTN_GPU_BUILDER_PROFILE=1
for r in 1 2; do
  ab_bench base_flex 32768 7 16 flex_prefill $P
  ab_bench new_flex 32768 7 16 flex_prefill $P
  ab_bench t2_flex 32768 7 16 flex_prefill $P SPATTN_EST_TAIL=2
  ab_bench off_flex 32768 7 16 flex_prefill $P SPATTN_EST_TAIL=0
  ab_bench base_vs 32768 7 16 vertical_slash $P
  ab_bench new_vs 32768 7 16 vertical_slash $P
  [ $r = 1 ] && ab_bench t2_vs 32768 7 16 vertical_slash $P SPATTN_EST_TAIL=2
  AB_BENCH_FLAGS=--block_m=128 ab_bench base_sl 32768 7 16 sampled_lines $P
  AB_BENCH_FLAGS=--block_m=128 ab_bench new_sl 32768 7 16 sampled_lines $P
  [ $r = 1 ] && AB_BENCH_FLAGS=--block_m=128 ab_bench t2_sl 32768 7 16 sampled_lines $P SPATTN_EST_TAIL=2
done
ab_bench base_flex128k 131072 3 4 flex_prefill $P
ab_bench new_flex128k 131072 3 4 flex_prefill $P
# Shared-memory wavefronts / bank conflicts of the estimate kernels (one 32K flex build each).
if [ "$SECONDS" -lt 118 ] && command -v ncu >/dev/null; then
  M=gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,smsp__inst_executed.sum,launch__registers_per_thread
  for v in base new; do
    b=bin/spattn-bench; [ $v = base ] && b=bin/spattn-bench-base
    timeout 40 ncu --kernel-name regex:EstimateKernel --launch-count 2 --metrics $M --csv \
      $b --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
      --group_by=all --recall_rows=16 --warmup=0 --repeat=1 --seq_len=32768 \
      --methods=flex_prefill > "$OUT/ncu_$v.csv" 2> "$OUT/raw/ncu_$v.err"
    ab_note "ncu $v rc=$?"
  done
fi
wait
ab_finish
