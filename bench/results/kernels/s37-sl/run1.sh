#!/usr/bin/env bash
# s37-sl: the one-CTA scans of common/scan.cu as ScanWideKernel (SPATTN_SCAN_WIDE, default 1 in
# this binary; 0 = main's ScanKernel) vs main 9043a11's spattn-bench, one call. Packed by pack.sh
# into /work/main/.device/s37-sl; run as `OUT=$OUT bash .device/s37-sl/run1.sh`.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-105}
ab_test build_index 75 bin/build_index_gpu_test --gtest_filter='ScanKernelsTest.*:*SampledLines*:*sampled_lines*'
ab_test sampled_lines_gpu 30 bin/sampled_lines_gpu_test
BM="--block_m=128"
for r in 1 2; do
  AB_BENCH_FLAGS=$BM ab_bench base_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
  AB_BENCH_FLAGS=$BM ab_bench new_prof 32768 7 16 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
done
for r in 1 2; do
  AB_BENCH_FLAGS=$BM ab_bench base 32768 7 16 sampled_lines
  AB_BENCH_FLAGS=$BM ab_bench new 32768 7 16 sampled_lines
done
AB_BENCH_FLAGS=$BM ab_bench base_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
AB_BENCH_FLAGS=$BM ab_bench new_prof_128k 131072 3 4 sampled_lines SPATTN_GPU_BUILDER_PROFILE=1
# Per-kernel durations of the scans of one 32K build (ncu's locked clocks): main's vs wide.
if [ "$SECONDS" -lt 110 ] && command -v ncu >/dev/null; then
  for w in 0 1; do
    timeout 25 env SPATTN_SCAN_WIDE=$w ncu --metrics gpu__time_duration.sum \
      --kernel-name regex:'Scan' --launch-count 8 \
      bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=16 --warmup=0 --repeat=1 --seq_len=32768 \
      --methods=sampled_lines --block_m=128 > "$OUT/raw/ncu_wide$w.txt" 2>&1
    ab_note "ncu wide=$w rc=$?"
  done
fi
ab_finish
