#!/usr/bin/env bash
# Lead, session 34: methods without their own block size (a_shape, vertical_slash, saap, and the
# searched / guarded defaults' non-sampled_lines heads) indexed at --block_m 64 vs 128; same
# binary (main 2237370), one process per cell, alternating.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_bm && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"; export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
for r in 1 2; do
  for bm in 64 128; do
    timeout 90 bin/spattn-bench $C --seq_len=32768 --recall_rows=32 --warmup=2 --repeat=7 --block_m=$bm \
      --methods=dense,a_shape,vertical_slash,searched,guarded \
      | sed -E "s/\"method\":\"([a-z_]+)\"/\"method\":\"\1_bm$bm\"/" >> "$OUT/bench32.jsonl" 2>> "$OUT/bench.err"
    note "32K bm$bm r$r rc=${PIPESTATUS[0]}"
  done
done
for bm in 64 128; do
  timeout 60 bin/spattn-bench $C --seq_len=32768 --recall_rows=32 --warmup=2 --repeat=7 --block_m=$bm \
    --calibrate --calibrate_len=3072 --calibrate_steps=3 --methods=saap \
    | sed -E "s/\"method\":\"([a-z_]+)\"/\"method\":\"\1_bm$bm\"/" >> "$OUT/bench32.jsonl" 2>> "$OUT/bench.err"
  note "32K saap bm$bm rc=${PIPESTATUS[0]}"
done
for bm in 64 128; do
  [ $SECONDS -gt 330 ] && { note "skip 128K bm$bm"; continue; }
  timeout 120 bin/spattn-bench $C --seq_len=131072 --recall_rows=16 --warmup=1 --repeat=3 --block_m=$bm \
    --methods=dense,a_shape,vertical_slash,searched,guarded \
    | sed -E "s/\"method\":\"([a-z_]+)\"/\"method\":\"\1_bm$bm\"/" >> "$OUT/bench128.jsonl" 2>> "$OUT/bench.err"
  note "128K bm$bm rc=${PIPESTATUS[0]}"
done
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
for f in ("bench32.jsonl", "bench128.jsonl"):
    p = os.path.join(out, f)
    if not os.path.exists(p): continue
    for l in open(p):
        r = json.loads(l)
        if "error" in r: print(f, r.get("method"), "ERROR", r["error"][:200]); continue
        b, k = r.get("index_build_ms", 0), r["kernel_ms"]
        print("%-14s %-24s build %7.3f kernel %8.3f total %8.3f density %.4f recall %.4f min %.4f tflops %s" % (
            f, r["method"], b, k, b + k, r.get("density", 1), r.get("recall", 1), r.get("recall_min", 1),
            r.get("pair_tflops", r.get("tflops", "-"))))
PY
note done
