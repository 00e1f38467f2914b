#!/usr/bin/env bash
# s16-scale device run (issue 11 item 5, 1M): one chunk of a chunked prefill at 1M keys — the
# last 65536 queries (a suffix of the keys, causal bottom-right) — PyTorch SDPA cuDNN
# (sdpa_chunk.py) and spattn-bench --methods=guarded on the same shape (llm_mix 32/8 heads d 128
# bf16, configs searched on a 16K prompt at target 0.95 and scaled to 1M by
# (1M/16K)^0.68 before the worker's recall guard, on the GPU). Packed by pack_1m.sh here.
# Search candidates: the methods whose GPU builders take 1M keys in one sequence (CANDS; run 1
# found block_sparse's, and flex_prefill's by the same shared-memory sizing, refusing
# 16384 / 8192 key blocks); the guard skips a try the builder refuses (its adaptive flex_prefill).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s16scale && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_chunk.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${SDPA_S:-30} python3 sdpa_chunk.py --k_len 1048576 --q_len 65536 --iters 3 --warmup 1 \
  > "$OUT/sdpa_chunk.jsonl" 2> "$OUT/sdpa_chunk.err"; note "sdpa rc=$?"
cat "$OUT/sdpa_chunk.jsonl"; tail -3 "$OUT/sdpa_chunk.err"
timeout ${BENCH_S:-80} bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
  --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=32 --seq_len=1048576 --q_len=65536 \
  --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=2 --methods=guarded \
  --search_candidates=${CANDS:-a_shape,vertical_slash,sample_attention,anchor} \
  > "$OUT/bench_1m.jsonl" 2> "$OUT/bench_1m.err"; note "bench rc=$?"
grep -E "setup|searched [0-9]+ cand|guarded on" "$OUT/bench_1m.err" | cut -c1-400
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
sd = [json.loads(l) for l in open(os.path.join(out, "sdpa_chunk.jsonl")) if l.strip()]
for l in open(os.path.join(out, "bench_1m.jsonl")):
    r = json.loads(l)
    if "error" in r:
        print("ERROR", r["error"][:300]); continue
    tot = r["index_build_ms"] + r["kernel_ms"]
    ratio = ("%.3f" % (tot / sd[0]["ms"])) if sd else "-"
    print("guarded 1M/64K: index %.2f kernel %.2f = %.2f ms (x%s cuDNN chunk) guard_recall_ms %s warm %s"
          " density %.4f recall %.4f min %.4f %s" % (r["index_build_ms"], r["kernel_ms"], tot, ratio,
          r.get("guard_recall_ms", "-"), r.get("guard_recall_warm_ms", "-"), r["density"],
          r["recall"], r["recall_min"], r["device"]))
PY
