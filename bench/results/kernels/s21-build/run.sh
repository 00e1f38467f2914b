#!/usr/bin/env bash
# s21-build main device run: build_index_gpu_test (every GPU builder against its CPU twin) on the
# defaults and (filtered to the changed builders) under the variant knobs, then spattn-bench with
# per-stage builder times (SPATTN_GPU_BUILDER_PROFILE=1): this branch ("new") and main's binary
# ("base") back to back at 32K and 128K (vertical_slash, block_sparse, flex_prefill, anchor),
# and this branch under variant knobs (varA: the session-20 form of each change; varB: the
# other register bounds) for the methods each knob touches.
set -u
cd "$(dirname "$0")"
W=/tmp/s21b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cp stages.py "$W/"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s21bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
T=bin/build_index_gpu_test
F='*vertical_slash*:*block_sparse*:*flex_prefill*:*anchor*:*Pooled*:*Merged*:*Assembled*'
VA="SPATTN_MERGE_MINB=1 SPATTN_ANCHOR_PAIRS=0 SPATTN_BS_RANGE=0"
VB="SPATTN_MERGE_MINB=8 SPATTN_ANCHOR_STRIPE_MINB=1"
timeout 60 $T > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
for v in ${VARTESTS:-}; do
  eval "env \$V$v timeout 60 $T --gtest_filter='$F'" > "$OUT/test_var$v.log" 2>&1
  note "build_index_gpu_test var$v rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_var$v.log" | tr '\n' ' ')"
done
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --warmup=${WARMUP:-2} --repeat=3"
M=vertical_slash,block_sparse,flex_prefill,anchor
bench() {  # variant len methods recall_rows env...
  local v=$1 len=$2 m=$3 rr=$4; shift 4
  local bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
  env "$@" timeout ${BENCH_S:-45} $bin $C --recall_rows=$rr --seq_len=$len --methods=$m >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
bench new 32768 $M 16 X=1
bench base 32768 $M 16 X=1
[ "${VAR32:-0}" = 1 ] && bench varA 32768 vertical_slash,anchor 0 $VA
[ "${VAR32B:-0}" = 1 ] && bench varB 32768 vertical_slash,anchor 0 $VB
bench new 131072 $M 16 X=1
bench base 131072 $M 16 X=1
[ "${VAR128:-0}" = 1 ] && [ $SECONDS -lt ${VAR128_BEFORE:-62} ] && bench varA 131072 block_sparse,flex_prefill,anchor 0 $VA
[ "${VAR128B:-0}" = 1 ] && bench varB 131072 flex_prefill,anchor 0 $VB
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base", "varA", "varB"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-5s %-16s %7d build %7.2f kernel %8.2f share %5.1f%% density %.4f recall %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r.get("recall")))
PY
python3 stages.py "$OUT" | sed "s|$OUT|run|" | tee "$OUT/stages.txt"
cat "$OUT/summary.txt"
# At most 8 files come back: everything in all.tgz, the summaries beside it.
(cd "$OUT" && tar -czf /tmp/s21b_all.tgz . && find . -type f ! -name summary.txt ! -name stages.txt ! -name gpu.txt -delete && mv /tmp/s21b_all.tgz all.tgz)
