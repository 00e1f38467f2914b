#!/usr/bin/env bash
# Session 32 early call: the unverified test refactor, the 1M bucket-loads A/B, 128K sl bm128 + oracle.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp builder_stages.py "$WORK/" 2>/dev/null
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 bin/build_index_gpu_test --gtest_filter='*SampledLines*:*Estimate*' > "$OUT/raw/test_refactor.log" 2>&1
note "build_index_gpu_test SampledLines+Estimate rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/raw/test_refactor.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A3 "$OUT/raw/test_refactor.log" | head -20 | tee -a "$OUT/summary.txt"
C1M="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=32 --seq_len=1048576 --q_len=65536 --warmup=1 --repeat=2
  --gpu_workspace_bytes=51539607552 --methods=sampled_lines --block_m=128"
for bl in 1 8; do
  [ $SECONDS -gt ${CUT1M:-200} ] && { note "skip 1M bl=$bl"; continue; }
  SPATTN_SL_BUCKET_LOADS=$bl SPATTN_GPU_BUILDER_PROFILE=1 timeout 110 bin/spattn-bench $C1M \
    >> "$OUT/raw/bench_1m_bl$bl.jsonl" 2>> "$OUT/raw/bench_1m_bl$bl.err"
  note "1M sl bm128 BUCKET_LOADS=$bl rc=$?"
done
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=64"
for m in sampled_lines oracle; do
  [ $SECONDS -gt ${CUT:-400} ] && { note "skip $m 128K"; continue; }
  rows=64; [ "$m" = sampled_lines ] && rows=256
  timeout 60 bin/spattn-bench $COMMON --seq_len=131072 --warmup=1 --repeat=3 \
    --methods=$m --block_m=128 --recall_rows=$rows 2>> "$OUT/raw/bench128.err" \
    | sed -E 's/"method":"(sampled_lines|oracle)"/"method":"\1_bm128"/' >> "$OUT/raw/bench128.jsonl"
  note "spattn-bench $m block_m 128 131072 rc=${PIPESTATUS[0]}"
done
/usr/bin/env python3 builder_stages.py bl1=$OUT/raw/bench_1m_bl1 bl8=$OUT/raw/bench_1m_bl8 > "$OUT/stages_1m.txt" 2>&1
cat "$OUT/stages_1m.txt" | head -40
for f in $OUT/raw/*.jsonl; do echo "== $f"; cut -c1-600 $f; done
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
note done
