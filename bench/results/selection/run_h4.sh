#!/usr/bin/env bash
# h4-selection device run: SDPA cuDNN + spattn-bench (topk_recall, oracle, searched, guarded) at
# 32K and 128K (METHODS, TAG: output names), llm_mix 32/8 heads d128 bf16, search at 16K (calibration length), target 0.95.
set -u
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 sdpa_reference.py --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; echo "sdpa rc=$? ${SECONDS}s"
cat "$OUT/sdpa.jsonl"
for len in 32768 131072; do
  t=150; [ $len = 131072 ] && t=300
  timeout $t bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$len \
    --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3 \
    --methods=${METHODS:-searched,guarded} >> "$OUT/${TAG:-bench}.jsonl" 2>> "$OUT/${TAG:-bench}.err"
  echo "bench $len rc=$? ${SECONDS}s"
done
grep -v "searched head" "$OUT/${TAG:-bench}.err" | tail -8 | cut -c1-1500
cat "$OUT/${TAG:-bench}.jsonl" | cut -c1-900
