#!/usr/bin/env bash
# s36-sl: pass 3 writes the classified codes itself (SPATTN_SL_EMIT_CLASSIFY, default 1 in this
# binary; 0 = main's pass 3 + classify step) vs main 2babfa1's spattn-bench, one call. Packed by
# pack.sh into /work/main/.device/s36-sl; run as `bash .device/s36-sl/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-110}
ab_test build_index 60 bin/build_index_gpu_test --gtest_filter='*SampledLines*:*sampled_lines*'
BM="--block_m=128"
for r in 1 2 3; do
  AB_BENCH_FLAGS=$BM ab_bench base_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
  AB_BENCH_FLAGS=$BM ab_bench new_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
done
for r in 1 2; do
  AB_BENCH_FLAGS=$BM ab_bench base 32768 7 16 sampled_lines
  AB_BENCH_FLAGS=$BM ab_bench new 32768 7 16 sampled_lines
done
AB_BENCH_FLAGS=$BM ab_bench new_off_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1 SPATTN_SL_EMIT_CLASSIFY=0
AB_BENCH_FLAGS=$BM ab_bench base_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
AB_BENCH_FLAGS=$BM ab_bench new_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
# Per-kernel durations of one 32K build (the first build of the process): main's pass 3 + classify
# vs the fused pass 3.
if [ "$SECONDS" -lt 95 ] && command -v ncu >/dev/null; then
  for v in off on; do
    e=1; [ $v = off ] && e=0
    timeout 40 env SPATTN_SL_EMIT_CLASSIFY=$e ncu --metrics gpu__time_duration.sum \
      --kernel-name regex:'Sl|Scan|Estimate|Evidence|Classify|Asm|Assem' --launch-count 40 \
      bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=16 --warmup=0 --repeat=1 --seq_len=32768 \
      --methods=sampled_lines --block_m=128 > "$OUT/raw/ncu_$v.txt" 2>&1
    ab_note "ncu $v rc=$?"
  done
fi
ab_finish
