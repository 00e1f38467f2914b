#!/usr/bin/env bash
# s20-build run 1 (profile only, base = main 36c27b9's spattn-bench from the lead's bundle):
# per-stage builder times for saap/anchor/sample_attention/block_sparse at 32K and 128K, and
# ncu of Saap's assign and classify kernels at 32K.
set -u
cd "$(dirname "$0")"
W=/tmp/s20b && rm -rf "$W" && mkdir -p "$W" && tar -xJf base.tar.xz -C "$W" bin/spattn-bench lib
cd "$W"; export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3 --calibrate --calibrate_steps=5"
for len in 32768 131072; do
  timeout 120 bin/spattn-bench $COMMON --seq_len=$len --methods=saap,anchor,sample_attention,block_sparse >> "$OUT/bench_base.jsonl" 2>> "$OUT/bench_base.err"
  note "bench base $len rc=$?"
done
if command -v ncu >/dev/null; then
  timeout 150 ncu --clock-control none -k regex:"SaapClassifyKernel|SaapAssignKernel" --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section InstructionStats \
    bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
    --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1 --seq_len=32768 \
    --calibrate --calibrate_steps=5 --methods=saap > "$OUT/ncu.txt" 2>&1
  note "ncu rc=$?"
fi
grep -h "saap\|anchor\|sample_att\|block_sp" "$OUT/bench_base.err" | grep -iv "searched" | head -60
cat "$OUT/summary.txt"
(cd "$OUT" && tar -czf /tmp/all.tgz . && rm -f ./*.txt ./*.jsonl ./*.err && mv /tmp/all.tgz all.tgz)
