#!/usr/bin/env bash
# s23-guard device run (on the GPU machine, bundle of pack.sh), two streams at once (densities
# and recall only: the timings of either are not claims, they share the host's 16 cores):
#  A. the guarded path: spattn-bench --device=cuda --methods=promise (targets 0.90/0.95/0.98,
#     configs searched on a 16K llm_mix prompt, held-out prompts of 4K..128K served through the
#     worker's recall guard on the GPU, 64 probe rows; served recall on 128 other rows per head).
#  B. sampled_lines alone (no guard, every head, 128-row blocks, 256 recall rows per head, the
#     session-22 defaults: clip_diagonals, floor 7, short_floor 9) for each "LEN:GAMMA" in RUNS,
#     started only while SECONDS + its estimate stays under CAP_B; niced under stream A.
# Logs to $OUT; table.txt last.
set -u
cd "$(dirname "$0")"
# BUNDLE: this folder's bundle.tar.xz (pack.sh), or another bundle holding bin/spattn-bench and
# lib/ (the lead's tests/gpu/pack.sh bundle: main's spattn-bench, when the working tree cannot
# hold both under the carry limit).
BUNDLE=$(realpath "${BUNDLE:-bundle.tar.xz}")
WORK=/tmp/s23guard && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf "$BUNDLE" -C "$WORK" bin/spattn-bench lib
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
MODEL="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16"
( timeout ${CAP_A:-150} bin/spattn-bench $MODEL --group_by=all --recall_rows=64 --seq_len=16384 \
    --search_len=16384 --methods=promise --promise_targets=0.90,0.95,0.98 \
    > "$OUT/promise.jsonl" 2> "$OUT/promise.err"
  note "A promise rc=$?" ) &
APID=$!
for v in ${RUNS:-65536:0.95 98304:0.95}; do
  IFS=: read -r len gamma <<< "$v"
  est=$(( len / 6000 + 4 ))  # seconds per cell alone (s22: 32K ~4 s, 128K ~20 s)
  if [ $(( SECONDS + est )) -gt ${CAP_B:-150} ]; then note "B skip $len g$gamma"; continue; fi
  timeout $(( ${CAP_B:-150} + 10 - SECONDS )) nice -n 10 bin/spattn-bench $MODEL --group_by=all \
    --recall_rows=256 --seq_len=$len --block_m=128 --warmup=0 --repeat=1 \
    --methods=sampled_lines --search_target_recall=$gamma --sampled_lines.gamma=$gamma \
    > "$OUT/sl_${len}_g${gamma}.jsonl" 2> "$OUT/sl_${len}_g${gamma}.err"
  note "B sampled_lines $len g$gamma rc=$?"
done
wait $APID
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import glob, json, os, sys
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "sl_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        if "error" in r: print(os.path.basename(f), "ERROR", r["error"][:200]); continue
        hs = sorted(float(x.split(":")[1]) for x in r.get("recall_heads", "").split(",") if x)
        print("sampled_lines %6d gamma %s density %.4f recall %.4f head_min %.4f heads>=.88/.89/.93/.96: %d/%d/%d/%d >=.91/.96/.99: %d/%d/%d of %d  %s" %
              (r["seq_len"], r["params"].split("gamma=")[1].split(",")[0], r["density"], r["recall"],
               hs[0] if hs else 0, sum(h >= .88 for h in hs), sum(h >= .89 for h in hs), sum(h >= .93 for h in hs),
               sum(h >= .96 for h in hs), sum(h >= .91 for h in hs), sum(h >= .96 for h in hs), sum(h >= .99 for h in hs),
               len(hs), r["device"]))
for line in open(os.path.join(out, "promise.jsonl")):
    r = json.loads(line)
    if "error" in r: print("promise ERROR", r["error"][:200]); continue
    if r.get("summary"):
        print("promise summary target %.2f lengths kept %d/%d recall %.4f heads within %d/%d kept %s" %
              (r["target"], r["lengths_kept"], r["lengths"], r["recall_mean"], r["heads_within_0_02"], r["heads"], r["kept"]))
        continue
    print("promise target %.2f %6d recall %.4f min %.4f within %d/%d density %.4f rebuilds %d guard %.1f ms kept %s" %
          (r["target"], r["seq_len"], r["recall_mean"], r["recall_min"], r["heads_within_0_02"], r["num_heads"],
           r["density"], r["guard_rebuilds"], r["guard_recall_ms"], r["kept"]))
PY
grep -v "searched head" "$OUT/promise.err" | tail -8
