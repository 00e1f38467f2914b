#!/usr/bin/env bash
# Lead s20: guarded (the worker's CUDA default path) with the adaptive try flex_prefill (default)
# vs sampled_lines, at 32K and 128K, SDPA in the same run.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"; cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=64 --calibrate --calibrate_steps=30"
for len in 32768 131072; do
  rep=5; [ "$len" -gt 65536 ] && rep=3
  for ad in ${ADS:-flex_prefill sampled_lines}; do
    timeout 200 bin/spattn-bench $COMMON --seq_len=$len --warmup=1 --repeat=$rep --methods=guarded \
      --guard_adaptive=$ad ${EXTRA:-} | sed -E "s/\"method\":\"guarded\"/\"method\":\"guarded_$ad\"/" >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
    note "guarded $ad $len rc=${PIPESTATUS[0]}"
  done
done
timeout 60 python3 sdpa_reference.py --seq_lens 32768,131072 > "$OUT/sdpa.jsonl" 2>> "$OUT/bench.err"
cat "$OUT/sdpa.jsonl"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r: print(r["method"], r["seq_len"], "ERROR", r["error"][:200]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-24s %7d index %8.2f kernel %8.2f total %8.2f ms density %.3f recall %.3f/%.3f guard_recall %s" %
          (r["method"], r["seq_len"], b, k, b + k, r["density"], r["recall"], r["recall_min"], r.get("guard_recall_ms")))
PY
tail -5 "$OUT/bench.err"
