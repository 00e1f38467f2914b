#!/usr/bin/env bash
# On the GPU machine, after run.sh's bundle: the searched per-head mix with the pattern search run
# at the full benchmark length (no length transfer), at 32K and 128K. Logs to $OUT.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
for len in 32768 131072; do
  timeout 420 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$len \
    --search_len=$len --warmup=2 --repeat=5 --methods=dense,searched \
    >> "$OUT/searched.jsonl" 2>> "$OUT/searched.err"
  echo "searched $len rc=$? (${SECONDS}s)"
done
grep -v "searched head" "$OUT/searched.err" | tail -6
python3 - "$OUT/searched.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r["seq_len"], "ERROR", r["error"][:160]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-10s %7d index %7.2f kernel %8.2f total %8.2f ms density %.3f recall %.3f/%.3f err %.3g %s" %
          (r["method"], r["seq_len"], b, k, b + k, r["density"], r["recall"], r["recall_min"],
           r.get("rel_l2_error", -1), r.get("choices", "")))
PY
