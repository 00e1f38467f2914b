#!/usr/bin/env bash
# s18-slkernel run 1 (diagnosis): the sampled_lines index per query block (cuda_bench's
# index_stats line) and its kernel's per-pair rate next to the dense kernel's, block_m 64 and
# 128, 32K and 128K; spattn-bench sampled_lines at block_m 64 and 128 (recall); ncu of the
# sparse kernel on the dense index and on the sampled_lines index (32K, block_m 64 and 128).
# Layout: bundle.tar.xz (bin/, lib/) next to this script.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s18slk && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
COMMON="--variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.1 --col_densities=0.05 --sampled_lines=0.95 --workspace_mb=8192 --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16"
timeout 120 bin/cuda_bench --seq_lens=32768 --iters=5 --warmup=1 $COMMON >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
note "cuda_bench 32K rc=$?"
timeout 150 bin/cuda_bench --seq_lens=131072 --iters=3 --warmup=1 $COMMON >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
note "cuda_bench 128K rc=$?"
SB="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64"
for len in 32768 131072; do
  for bm in 64 128; do
    timeout 90 bin/spattn-bench $SB --seq_len=$len --warmup=1 --repeat=3 --block_m=$bm \
      --methods=dense,sampled_lines | sed "s/\"method\":\"/\"block_m\":$bm,\"method\":\"/" >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
    note "spattn-bench $len block_m $bm rc=${PIPESTATUS[0]}"
  done
done
if command -v ncu >/dev/null; then
  for bm in 64 128; do
    echo "=== ncu block_m $bm (launch 0: dense index, 1: sampled_lines)" >> "$OUT/ncu.txt"
    timeout 100 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-skip 0 --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      bin/cuda_bench --seq_lens=32768 --variants= --sparse_variants=5 --block_ms=$bm --range_densities= \
      --col_densities= --sampled_lines=0.95 --workspace_mb=8192 --iters=1 --warmup=0 >> "$OUT/ncu.txt" 2>&1
    note "ncu block_m $bm rc=$?"
  done
fi
grep index_stats "$OUT/bench.jsonl"
grep -v index_stats "$OUT/bench.jsonl" | python3 -c '
import json,sys
for l in sys.stdin:
  r=json.loads(l); print(r["kernel"], r["seq_len"], r["block_m"], "dens %.4f ms %.3f tf %.1f vs_dense %s" % (r["density"], r["ms"], r["tflops"], r.get("vs_dense","-")))'
cat "$OUT/spattn_bench.jsonl" | python3 -c '
import json,sys
for l in sys.stdin:
  r=json.loads(l); print(r["method"], r["seq_len"], r["block_m"], "build %.2f kernel %.2f dens %.4f recall %.3f tf %.1f" % (r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], r.get("tflops",0)))'
grep -E "^=== ncu|Duration|Throughput|L2 Hit|Mem Busy|Max Bandwidth|Issued Warp|No Eligible|Stall" "$OUT/ncu.txt" | head -60
tail -5 "$OUT/errors.log"
