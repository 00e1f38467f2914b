#!/usr/bin/env bash
# Session 28 call 2 (right after run.sh, same machine if still warm): the 1M chunk's guarded path
# with the sampled_lines-only search (the defaults' search up to 128K) against cuDNN's chunk in the
# same call, then two A/Bs of this session's default-on knobs at 128K: flex_prefill's skip of the
# query-aware kernels (SPATTN_FLEX_QA_SKIP) and sampled_lines' late emit flush
# (SPATTN_SL_EMIT_FLUSH=late, off by default). One process per cell.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/spattn_gpu
[ -x $W/bin/spattn-bench ] || { rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W; }
cp sdpa_chunk.py $W/
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary2.txt"; }
cd $W && export LD_LIBRARY_PATH=$PWD/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu2.txt"
timeout 60 python3 sdpa_chunk.py --k_len 1048576 --q_len 65536 --iters 3 --warmup 1 \
  > "$OUT/sdpa_chunk.jsonl" 2>> "$OUT/call2.err"
note "sdpa chunk rc=$?"
C1M="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=32 --seq_len=1048576 --q_len=65536 --warmup=1 --repeat=2
  --gpu_workspace_bytes=51539607552"
timeout 170 bin/spattn-bench $C1M --search_len=16384 --search_target_recall=0.95 --methods=guarded \
  --search_candidates=sampled_lines --search_sampled_lines_margin=0.01 \
  --guard_adaptive=sampled_lines,flex_prefill 2>> "$OUT/call2.err" \
  | sed -E 's/"method":"guarded"/"method":"guarded_sl"/' >> "$OUT/call2.jsonl"
note "guarded_sl 1M rc=${PIPESTATUS[0]}"
C128="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --seq_len=131072 --recall_rows=4 --warmup=1 --repeat=3"
ab() {  # label env method extra-flags
  [ "$SECONDS" -gt "${CUT:-330}" ] && { note "$1 skipped (time)"; return; }
  env $2 timeout 60 bin/spattn-bench $C128 --methods=$3 $4 2>> "$OUT/call2.err" \
    | sed -E "s/\"method\":\"$3\"/\"method\":\"$3_$1\"/" >> "$OUT/call2.jsonl"
  note "$1 rc=${PIPESTATUS[0]}"
}
ab skip SPATTN_FLEX_QA_SKIP=1 flex_prefill ""
ab noskip SPATTN_FLEX_QA_SKIP=0 flex_prefill ""
ab late SPATTN_SL_EMIT_FLUSH=late sampled_lines --block_m=128
ab default SPATTN_SL_EMIT_FLUSH=default sampled_lines --block_m=128
ab skip2 SPATTN_FLEX_QA_SKIP=1 flex_prefill ""
ab noskip2 SPATTN_FLEX_QA_SKIP=0 flex_prefill ""
/usr/bin/env python3 - "$OUT/call2.jsonl" <<'PY' | tee -a "$OUT/summary2.txt"
import json, sys
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except Exception: continue
    if "error" in d:
        print(f"{d['method']:28s} {d['seq_len']}/{d.get('q_len')}: error {d['error']}")
        continue
    print(f"{d['method']:28s} {d['seq_len']}/{d.get('q_len')}: index {d['index_build_ms']:.2f} kernel "
          f"{d['kernel_ms']:.2f} density {d['density']:.4f} recall {d['recall']:.4f} head min "
          f"{d.get('recall_head_min', 0):.4f}")
PY
