#!/usr/bin/env bash
# Issue 10's device run: the GPU tests, then sets of (PyTorch SDPA, cuda_bench) over the same
# shapes in the same run (cuda_bench reads SDPA's lines back with --sdpa and prints our ms, SDPA's
# ms, the ratio and TFLOP/s per dense line), then optionally spattn-bench --device=cuda.
# Layout as kernels/cuda/gpu/pack_gpu.sh makes it (bundle.tar.xz + this script + the .py files).
#
# Env:
#   TESTS="attention_cuda_test cuda_engine_test build_index_gpu_test" (binaries to run first)
#   SETS="SHAPE|EXTRA|ENV;SHAPE|EXTRA|ENV;..." where SHAPE are flags both sdpa_reference.py and
#     cuda_bench take (--seq_lens= --kv_heads= --head_dim= --causal= --dtype= --iters= --warmup=),
#     EXTRA only cuda_bench's (--variants=5 --tag=...), ENV variables for cuda_bench (benchmark
#     knobs, kernels/cuda/README.md). SDPA runs once per distinct SHAPE (cuDNN backend;
#     SDPA_BACKENDS to change).
#   SPATTN_BENCH="flags" (spattn-bench runs, ';'-separated), BENCH_ENV (their environment).
#   MINFERENCE_ARGS="--seq_lens ... --kernels a_shape,block_sparse": MInference's public Triton
#     kernels (files fetched into ref/ beside this script, never committed) through
#     kernels/cuda/attention/hopper/minference_reference.py.
# Outputs under $OUT: gpu.txt, tests.log, sdpa.jsonl, bench.jsonl, spattn_bench.jsonl,
# minference.jsonl, errors.log (stderr of everything, builder stage times included), summary.txt.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/spattn_matrix && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
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
for t in ${TESTS:-}; do
  timeout "${TEST_TIMEOUT:-150}" "bin/$t" >> "$OUT/tests.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -2 | tr '\n' ' ')"
done
# attention_cuda_test again under benchmark knobs (KNOB_TEST_ENV), e.g. the sparse kernel's shapes.
if [ -n "${KNOB_TEST_ENV:-}" ]; then
  env $KNOB_TEST_ENV timeout "${TEST_TIMEOUT:-150}" bin/attention_cuda_test \
    --gtest_filter="${KNOB_TEST_FILTER:-*}" >> "$OUT/tests.log" 2>&1
  note "attention_cuda_test [$KNOB_TEST_ENV] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -2 | tr '\n' ' ')"
fi
: > "$OUT/sdpa.jsonl"
: > "$OUT/bench.jsonl"
last_shape=""
IFS=';' read -ra SET_LIST <<< "${SETS:-}"
for set in "${SET_LIST[@]}"; do
  [ -n "$set" ] || continue
  IFS='|' read -r shape extra envs <<< "$set"
  if [ "$shape" != "$last_shape" ]; then
    PYTHONUNBUFFERED=1 timeout "${SDPA_TIMEOUT:-300}" python3 sdpa_reference.py $shape \
      --backends "${SDPA_BACKENDS:-cudnn}" > "$WORK/sdpa_part.jsonl" 2>> "$OUT/errors.log"
    note "sdpa $shape rc=$?"
    cat "$WORK/sdpa_part.jsonl" >> "$OUT/sdpa.jsonl"
    last_shape=$shape
  fi
  env $envs timeout "${BENCH_TIMEOUT:-300}" bin/cuda_bench $shape $extra \
    --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "cuda_bench $shape $extra [$envs] rc=$?"
done
IFS=';' read -ra SB_LIST <<< "${SPATTN_BENCH:-}"
for sb in "${SB_LIST[@]}"; do
  [ -n "$sb" ] || continue
  env ${BENCH_ENV:-} timeout "${SB_TIMEOUT:-150}" bin/spattn-bench $sb \
    >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
  note "spattn-bench $sb rc=$?"
done
if [ -d ref ] && [ -n "${MINFERENCE_ARGS:-}" ]; then
  PYTHONUNBUFFERED=1 timeout "${REF_TIMEOUT:-120}" python3 minference_reference.py --ref_dir ref \
    $MINFERENCE_ARGS > "$OUT/minference.jsonl" 2>> "$OUT/errors.log"
  note "minference $MINFERENCE_ARGS rc=$?"
fi
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== tests"
grep -hE "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -20
echo "=== dense (ours vs SDPA, same run)"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    shape = "%s %s/%s d%s %s" % (r["dtype"], r["heads"], r["kv_heads"], r["head_dim"],
                                 "causal" if r["causal"] else "full")
    if r["kernel"].startswith("dense"):
        print("%-26s %7d %-13s %9.3f ms %6.1f TF | sdpa %9s ms %6s TF | x%s  %s" % (
            shape, r["seq_len"], r["kernel"], r["ms"], r["tflops"], r.get("sdpa_ms", "-"),
            r.get("sdpa_tflops", "-"), r.get("vs_sdpa", "-"), r.get("tag", "")))
    else:
        print("%-26s %7d %-28s bm%d dens %.3f %8.3f ms %6.1f TF vs_dense %s  %s" % (
            shape, r["seq_len"], r["kernel"], r["block_m"], r["density"], r["ms"], r["tflops"],
            r.get("vs_dense", "-"), r.get("tag", "")))
PY
echo "=== spattn-bench (index / kernel ms, per-pair TFLOP/s vs dense)"
python3 - "$OUT/spattn_bench.jsonl" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.startswith("{"): continue
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r.get("seq_len"), "ERROR", r["error"][:120]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-16s %7d index %8.3f kernel %8.3f share %5.1f%% density %.3f recall %.3f %6.1f TF vs_dense %s"
          % (r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"],
             r["tflops"], r.get("vs_dense", "-")))
PY
grep -h "gpu builder" "$OUT/errors.log" 2>/dev/null | tail -12 | cut -c1-250
echo "=== minference"; cat "$OUT/minference.jsonl" 2>/dev/null
echo "=== errors"; grep -v "^cuda_bench on\|^gpu builder\|^spattn-bench: workload" "$OUT/errors.log" 2>/dev/null | tail -6
cat "$OUT/summary.txt"
