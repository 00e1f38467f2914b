#!/usr/bin/env bash
# Session 29 call 2 (right after run.sh, same machine if still warm): the 1M chunk (cuDNN's chunk
# in the same call; sampled_lines on 128-row blocks with this session's builder; the guarded path
# with the sampled_lines-only search at the margin 0: gamma = target on every head, the guard
# widening the heads that fall short; the defaults' margin 0.01 ran in the early call), then the
# A/Bs at 128K: s29-vsflex's fast estimate against the exact one. One process per cell.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/spattn_gpu
[ -x $W/bin/spattn-bench ] || { rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W; }
cp sdpa_chunk.py builder_stages.py $W/
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
SPATTN_GPU_BUILDER_PROFILE=1 timeout 120 bin/spattn-bench $C1M --methods=sampled_lines --block_m=128 \
  >> "$OUT/sl1m.jsonl" 2> "$OUT/sl1m.err"
note "sampled_lines bm128 1M rc=$?"
python3 builder_stages.py sl1m="$OUT/sl1m" | tee -a "$OUT/summary2.txt"
for m in 0; do  # 0.01: the early call's guarded_sl line (996.4 ms)
  [ "$SECONDS" -gt "${CUT1M:-200}" ] && { note "guarded_sl margin $m skipped (time)"; continue; }
  timeout 170 bin/spattn-bench $C1M --search_len=16384 --search_target_recall=0.95 --methods=guarded \
    --search_candidates=sampled_lines --search_sampled_lines_margin=$m \
    --guard_adaptive=sampled_lines,flex_prefill 2>> "$OUT/call2.err" \
    | sed -E "s/\"method\":\"guarded\"/\"method\":\"guarded_sl_m$m\"/" >> "$OUT/call2.jsonl"
  note "guarded_sl margin $m 1M rc=${PIPESTATUS[0]}"
done
C128="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --seq_len=131072 --recall_rows=4 --warmup=1 --repeat=3"
ab() {  # label env method extra-flags
  [ "$SECONDS" -gt "${CUT:-330}" ] && { note "$1 skipped (time)"; return; }
  env $2 timeout 60 bin/spattn-bench $C128 --methods=$3 $4 2>> "$OUT/call2.err" \
    | sed -E "s/\"method\":\"$3\"/\"method\":\"$3_$1\"/" >> "$OUT/call2.jsonl"
  note "$1 rc=${PIPESTATUS[0]}"
}
# s29-vsflex's fast estimate (ex2.approx, passes 1-2 fused; the default) against the exact one
# (SPATTN_EST_EXP=exact, main's passes before this session) at 128K, in one call (the helper's
# base ran on another machine), alternating.
ab fast SPATTN_EST_EXP=fast flex_prefill ""
ab exact SPATTN_EST_EXP=exact flex_prefill ""
ab fast SPATTN_EST_EXP=fast vertical_slash ""
ab exact SPATTN_EST_EXP=exact vertical_slash ""
/usr/bin/env python3 - "$OUT/sl1m.jsonl" "$OUT/call2.jsonl" <<'PY' | tee -a "$OUT/summary2.txt"
import json, sys
for p in sys.argv[1:]:
    try: lines = open(p).read().splitlines()
    except OSError: continue
    for l in lines:
        try: d = json.loads(l)
        except Exception: continue
        if "error" in d:
            print(f"{d['method']:28s} {d['seq_len']}/{d.get('q_len')}: error {d['error']}"); continue
        print(f"{d['method']:28s} {d['seq_len']}/{d.get('q_len')}: index {d['index_build_ms']:.2f} kernel "
              f"{d['kernel_ms']:.2f} density {d['density']:.4f} recall {d['recall']:.4f} head min "
              f"{d.get('recall_head_min', 0):.4f} cols {d.get('index_cols')}")
PY
(cd "$OUT" && tar -cJf call2_raw.tar.xz call2.err sl1m.err && rm -f call2.err sl1m.err)
