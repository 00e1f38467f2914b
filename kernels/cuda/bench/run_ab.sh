#!/usr/bin/env bash
# A/B device run of the dense kernel's knobs against PyTorch SDPA (cuDNN) in the same run, plus
# the reference kernels of the sparse methods on spattn-bench's tensors. Layout as
# kernels/cuda/gpu/pack_gpu.sh makes it (bundle.tar.xz + this script + sdpa_reference.py,
# attention/hopper/minference_reference.py and sparse_references.py + ref/, the fetched files).
#
# Env:
#   TESTS="attention_cuda_test cuda_engine_test" (binaries run first)
#   AB="SHAPE|EXTRA@..."  per item (items separated by @: knob sets use ;): SDPA on SHAPE, cuda_bench SHAPE EXTRA (EXTRA carries
#     --knob_sets=... --rounds=...), SDPA on SHAPE again (SDPA's drift across the item shows as
#     two lines per shape). SHAPE: flags both take (--seq_lens= --kv_heads= --head_dim= --causal=
#     --dtype= --iters= --warmup=).
#   BASELINE="SHAPE|EXTRA@..." cuda_bench_base (another build's cuda_bench, e.g. before a
#     change, in bundle bin/) on those shapes, right after the matching AB item's cuda_bench.
#   ALT="SHAPE|EXTRA@..." ALT_N=3: per item SDPA, then ALT_N times (cuda_bench_base, cuda_bench)
#     as separate processes with ALT_SLEEP seconds (default 2) before each, then SDPA again:
#     equal conditions for two builds (no process runs long enough to heat the GPU more than
#     the other's).
#   LONG="SHAPE|OURS_WARMUP@..." shapes too long for warm-ups of both: SDPA with SHAPE as given,
#     ours with --warmup=OURS_WARMUP (first launch included in nothing but that warm-up).
#   REFS="32768,131072" spattn-bench --dump at each length (llm_mix, 32/8 heads, d 128, bf16,
#     methods REF_METHODS) then sparse_references.py on the dumped tensors.
# Outputs under $OUT: gpu.txt, tests.log, sdpa.jsonl, bench.jsonl, base.jsonl, spattn_bench.jsonl,
# refs.jsonl, errors.log, summary.txt.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/spattn_ab && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp "$HERE"/*.py "$WORK/" 2>/dev/null
[ -d "$HERE/ref" ] && cp -r "$HERE/ref" "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee "$OUT/gpu.txt"
# SM clock, power and temperature once a second for the whole run (the 8K numbers move with them).
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
  -l 1 > "$OUT/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
for t in ${TESTS:-}; do
  timeout "${TEST_TIMEOUT:-150}" "bin/$t" >> "$OUT/tests.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -2 | tr '\n' ' ')"
done
sdpa() {  # sdpa SHAPE...: appends SDPA's lines, leaves them in $WORK/sdpa_part.jsonl too
  PYTHONUNBUFFERED=1 timeout "${SDPA_TIMEOUT:-300}" python3 sdpa_reference.py "$@" \
    --backends cudnn > "$WORK/sdpa_part.jsonl" 2>> "$OUT/errors.log"
  local rc=$?
  cat "$WORK/sdpa_part.jsonl" >> "$OUT/sdpa.jsonl"
  note "sdpa $* rc=$rc"
}
IFS='@' read -ra AB_LIST <<< "${AB:-}"
IFS='@' read -ra BASE_LIST <<< "${BASELINE:-}"
for item in "${AB_LIST[@]}"; do
  [ -n "$item" ] || continue
  IFS='|' read -r shape extra <<< "$item"
  sdpa $shape
  timeout "${BENCH_TIMEOUT:-300}" bin/cuda_bench $shape $extra --sdpa="$WORK/sdpa_part.jsonl" \
    >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "cuda_bench $shape $extra rc=$?"
  for b in "${BASE_LIST[@]}"; do
    IFS='|' read -r bshape bextra <<< "$b"
    [ "$bshape" = "$shape" ] || continue
    timeout "${BENCH_TIMEOUT:-300}" bin/cuda_bench_base $bshape $bextra \
      --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/base.jsonl" 2>> "$OUT/errors.log"
    note "cuda_bench_base $bshape $bextra rc=$?"
  done
  sdpa $shape
done
IFS='@' read -ra ALT_LIST <<< "${ALT:-}"
for item in "${ALT_LIST[@]}"; do
  [ -n "$item" ] || continue
  IFS='|' read -r shape extra <<< "$item"
  sdpa $shape
  for i in $(seq "${ALT_N:-3}"); do
    for b in cuda_bench_base cuda_bench; do
      sleep "${ALT_SLEEP:-2}"
      out=bench.jsonl
      [ $b = cuda_bench_base ] && out=base.jsonl
      timeout "${BENCH_TIMEOUT:-300}" bin/$b $shape $extra --tag="alt$i" \
        --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/$out" 2>> "$OUT/errors.log"
      note "$b $shape alt$i rc=$?"
    done
  done
  sleep "${ALT_SLEEP:-2}"
  sdpa $shape
done
IFS='@' read -ra LONG_LIST <<< "${LONG:-}"
for item in "${LONG_LIST[@]}"; do
  [ -n "$item" ] || continue
  IFS='|' read -r shape ours_warmup <<< "$item"
  sdpa $shape
  timeout "${BENCH_TIMEOUT:-300}" bin/cuda_bench $shape --warmup="${ours_warmup:-0}" \
    --variants=5 --sparse_variants= --block_ms= --tag=long --sdpa="$WORK/sdpa_part.jsonl" \
    >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "cuda_bench $shape --warmup=${ours_warmup:-0} rc=$?"
done
REFS=${REFS:-}
for n in ${REFS//,/ }; do
  timeout "${SB_TIMEOUT:-200}" bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 --warmup=1 \
    --repeat=3 --seq_len="$n" --methods="${REF_METHODS:-dense,vertical_slash,flex_prefill,anchor}" \
    --dump="$WORK/w$n.safetensors" >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
  note "spattn-bench $n rc=$?"
  PYTHONUNBUFFERED=1 timeout "${REF_TIMEOUT:-240}" python3 sparse_references.py --ref_dir ref \
    --tensors "$WORK/w$n.safetensors" ${REF_ARGS:-} >> "$OUT/refs.jsonl" 2>> "$OUT/errors.log"
  note "sparse_references $n rc=$?"
  rm -f "$WORK/w$n.safetensors"
done
kill "$CLOCKS_PID" 2>/dev/null
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== tests"; grep -hE "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -20
echo "=== dense (ours, tag/knobs; SDPA before | after the item, same run)"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
key = lambda r: (r["seq_len"], r["heads"], r["kv_heads"], r["head_dim"], r["causal"], r["dtype"])
sd = {}
for r in rows("sdpa.jsonl"):
    sd.setdefault(key(r), []).append(r["tflops"])
for name in ("bench.jsonl", "base.jsonl"):
    for r in rows(name):
        if not r["kernel"].startswith("dense"):
            continue
        s = sd.get(key(r), [])
        ref = sum(s) / len(s) if s else float("nan")
        print("%-5s %s %2d/%-2d d%-3d %-6s %7d %-15s %-22s %6.1f TF | sdpa %s | x%.3f" % (
            name[:4], r["dtype"], r["heads"], r["kv_heads"], r["head_dim"],
            "causal" if r["causal"] else "full", r["seq_len"], r["kernel"], r.get("tag", ""),
            r["tflops"], "/".join("%.0f" % x for x in s), r["tflops"] / ref))
PY
echo "=== spattn-bench"; cut -c1-400 "$OUT/spattn_bench.jsonl" 2>/dev/null
echo "=== refs"; cat "$OUT/refs.jsonl" 2>/dev/null
echo "=== errors"; grep -v "^cuda_bench on\|^gpu builder" "$OUT/errors.log" 2>/dev/null | tail -8
cat "$OUT/summary.txt"
