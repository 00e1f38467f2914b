#!/usr/bin/env bash
# On the GPU machine, after pack.sh's bundle: the README's sparse table with 10 timed runs per
# method after 2 warm-ups, at 32K and 128K, every method plus the searched per-head mix (search
# at the full length). Logs to $OUT.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for len in 32768 131072; do
  timeout 270 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$len \
    --search_len=$len --calibrate --calibrate_steps=30 --warmup=2 --repeat=10 \
    --methods=dense,a_shape,vertical_slash,block_sparse,flex_prefill,sample_attention,anchor,saap,searched \
    >> "$OUT/median10.jsonl" 2>> "$OUT/median10.err"
  echo "bench $len rc=$? (${SECONDS}s)"
done
python3 - "$OUT/median10.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r["seq_len"], "ERROR", r["error"][:160]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-16s %7d index %7.2f kernel %8.2f total %8.2f ms density %.3f recall %.3f/%.3f err %.3g" %
          (r["method"], r["seq_len"], b, k, b + k, r["density"], r["recall"], r["recall_min"],
           r.get("rel_l2_error", -1)))
PY
