#!/usr/bin/env bash
# Dense 32K recheck: our dense kernel (spattn-bench, 3 processes) and cuDNN SDPA, alternating.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"; cd "$WORK"; export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 --seq_len=32768 --warmup=3 --repeat=20 --methods=dense"
for i in 1 2 3; do
  timeout 60 bin/spattn-bench $C 2>/dev/null | sed -E 's/.*"kernel_ms":([0-9.]+).*/ours dense 32K kernel_ms \1/' | tee -a "$OUT/dense_check.txt"
  timeout 60 python3 sdpa_reference.py --seq_lens 32768 2>/dev/null | grep cudnn | sed -E 's/.*"ms": ([0-9.]+), "ms_min": ([0-9.]+).*/cudnn 32K ms \1 min \2/' | tee -a "$OUT/dense_check.txt"
done
