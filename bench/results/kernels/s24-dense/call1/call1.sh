#!/usr/bin/env bash
# s24-dense call 1: dense tests (the cluster test included), pairs at 128K / 8K d128 full with
# new vs mc (SPATTN_HOPPER_CLUSTER=2), ncu of ours and cuDNN at the base clock.
set -u
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/spattn_dense
OUT=${OUT:-/tmp/out}
mkdir -p "$W" "$OUT/m" "$OUT/n"
SECONDS=0
tar -xJf "$D/bundle.tar.xz" -C "$W"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/summary.txt"
LD_LIBRARY_PATH=$W/lib timeout 45 "$W/bin/attention_cuda_test" --gtest_filter='*Dense*' > "$OUT/tests.log" 2>&1
rc=$?
echo "tests rc=$rc (${SECONDS}s)" | tee -a "$OUT/summary.txt"
grep -E "^\[ +(OK|FAILED|PASSED) " "$OUT/tests.log" | tail -10
SETS=""; KN=""
if [ $rc = 0 ]; then SETS="|new:;mc:SPATTN_HOPPER_CLUSTER=2"; KN="|SPATTN_HOPPER_CLUSTER=2"; fi
HEAT= ROUNDS=1 PAIRS_TIMEOUT=80 CELL_GROUPS="--seq_lens=131072 --kv_heads=8,32 --head_dim=128 --causal=0 --dtype=bf16,fp16$SETS@--seq_lens=8192 --kv_heads=8,32 --head_dim=128 --causal=0 --dtype=bf16,fp16$SETS" \
  OUT=$OUT/m timeout 85 bash "$D/run_dense_matrix.sh" > "$OUT/m/stdout.txt" 2>&1
echo "matrix rc=$? (${SECONDS}s)" | tee -a "$OUT/summary.txt"
grep -A30 "^== dense vs" "$OUT/m/table.txt" | cut -c1-150 | head -40
CELLS="--seq_lens=131072 --kv_heads=8 --head_dim=128 --causal=0 --dtype=bf16$KN@--seq_lens=8192 --kv_heads=8 --head_dim=128 --causal=0 --dtype=fp16$KN@--seq_lens=8192 --kv_heads=32 --head_dim=128 --causal=1 --dtype=fp16" \
SDPA_SHAPES="--seq_lens=131072 --kv_heads=8 --head_dim=128 --causal=0 --dtype=bf16@--seq_lens=8192 --kv_heads=8,32 --head_dim=128 --causal=0,1 --dtype=fp16" \
SDPA_LAUNCHES=8 OUT=$OUT/n timeout 75 bash "$D/run_dense_ncu.sh"
echo "ncu rc=$? (${SECONDS}s)" | tee -a "$OUT/summary.txt"
grep -E "^===|Duration|SM Frequency|gpu__time_duration|lts__t_sector_hit_rate|dram__bytes_read|Grid Size|Cluster Size|Block Size|Registers Per|Shared Memory Config|Dynamic Shared|Memory Throughput|Compute \(SM\)|cudnn|sdpa" "$OUT/n/ncu.txt" | grep -v "^==PROF==" | head -150
cd "$OUT" && tar czf m.tgz m && tar czf n.tgz n && rm -rf m n
