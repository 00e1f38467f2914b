#!/usr/bin/env bash
# On the GPU machine, after run.sh (same bundle, packed by pack.sh): issue 11 item 3 (the recall
# promise) on another synthetic model than run.sh's: spattn-bench --methods=promise with
# --seed=$SEED (default 1: llm_mix model seed 1; run.sh and the session-23 cells used seed 0).
# For targets 0.90 / 0.95 / 0.98, configs searched on a 16K prompt of that model, held-out
# prompts of 0.25x..(MAX_LEN / 16K)x served through the worker's recall guard on the GPU (64
# probe rows), recall on 128 other rows per head; a target is kept at a length when the mean
# reaches it and >= 95% of heads are within 0.02. Logs in $OUT; the table last.
# Options (environment): CANDIDATES (--search_candidates; default: spattn-bench's, auto: the
# search's candidates by each held-out length, sampled_lines alone at sampled_lines_margin 0.01
# up to 128K, every method above; all: every method at every length), MARGIN (--search_sampled_lines_margin,
# only with CANDIDATES=all or a method list; guarded_sl: CANDIDATES=sampled_lines MARGIN=0.01), GUARD_ADAPTIVE=sampled_lines,flex_prefill
# (--guard_adaptive; default: the worker's), MIN_LEN (--promise_min_len, default 0), MAX_LEN
# (default 65536), WORKSPACE (--gpu_workspace_bytes; 0.98 at 128K needs more than the default
# 8 GiB), CAP (seconds, default 240).
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu_promise && rm -rf "$WORK" && mkdir -p "$WORK"
tar -xJf bundle.tar.xz -C "$WORK" bin/spattn-bench lib
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SEED=${SEED:-1}
EXTRA=()
TAG=""
if [ -n "${CANDIDATES:-}" ]; then EXTRA+=("--search_candidates=$CANDIDATES"); TAG="_$CANDIDATES"; fi
if [ -n "${MARGIN:-}" ]; then EXTRA+=("--search_sampled_lines_margin=$MARGIN"); fi
if [ -n "${GUARD_ADAPTIVE:-}" ]; then EXTRA+=("--guard_adaptive=$GUARD_ADAPTIVE"); fi
if [ -n "${WORKSPACE:-}" ]; then EXTRA+=("--gpu_workspace_bytes=$WORKSPACE"); fi
TAG=${TAG//,/+}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu_promise.txt"
timeout ${CAP:-240} bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
  --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
  --search_len=16384 --seed="$SEED" --methods=promise --promise_targets=0.90,0.95,0.98 \
  --promise_min_len=${MIN_LEN:-0} --promise_max_len=${MAX_LEN:-65536} ${EXTRA[@]+"${EXTRA[@]}"} \
  > "$OUT/promise_seed$SEED$TAG.jsonl" 2> "$OUT/promise_seed$SEED$TAG.err"
echo "spattn-bench promise seed $SEED$TAG rc=$? (${SECONDS}s)" | tee -a "$OUT/summary_promise.txt"
python3 - "$OUT/promise_seed$SEED$TAG.jsonl" <<'PY' | tee -a "$OUT/summary_promise.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| target | seq_len | recall mean / min | heads within 0.02 | density | candidates | kept |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r.get("summary") or "seq_len" not in r:
        continue
    print("| %.2f | %d | %.4f / %.4f | %d/%d | %.4f | %s | %s |" % (
        r["target"], r["seq_len"], r["recall_mean"], r["recall_min"], r["heads_within_0_02"],
        r["num_heads"], r["density"], r.get("candidates", "-"),
        "kept" if r["kept"] else "NOT kept"))
for r in rows:
    if r.get("summary"):
        print(json.dumps(r))
PY
