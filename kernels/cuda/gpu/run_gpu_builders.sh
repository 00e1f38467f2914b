#!/usr/bin/env bash
# One GPU-machine run of the GPU index builders and the worker's GPU path: build_index_gpu_test
# (every method against its CPU twin), cuda_engine_test and cuda_backend_test (the worker's CUDA
# backend), then spattn-bench over the worker's path (--device=cuda) and over the path before
# plan / run (--device=cuda-host-index) in the same run, for the time saved per request.
# Expects pack_gpu.sh's layout with
#   BINS="build_index_gpu_test cuda_engine_test server/cuda_backend_test" (and spattn-bench).
# Env: TESTS (default: all three), TEST_FILTER, BENCH_LENS (default 32768), BENCH_METHODS,
# BENCH_ARGS. Logs under $OUT (or /tmp/out); a short summary is printed last.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu_builders && rm -rf "$WORK" && mkdir -p "$WORK" &&
  tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$OUT/gpu.txt"
for t in ${TESTS:-build_index_gpu_test cuda_engine_test cuda_backend_test}; do
  [ -x "bin/$t" ] || continue
  timeout "${TEST_TIMEOUT:-150}" "bin/$t" --gtest_filter="${TEST_FILTER:-*}" \
    > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
BENCH="--workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all
  --recall_rows=16 --calibrate --calibrate_steps=5 --warmup=1 --repeat=3
  --methods=${BENCH_METHODS:-dense,a_shape,vertical_slash,block_sparse,flex_prefill,sample_attention,anchor,saap}
  ${BENCH_ARGS:-}"
for len in ${BENCH_LENS:-32768}; do
  for device in cuda cuda-host-index; do
    timeout "${BENCH_TIMEOUT:-120}" bin/spattn-bench $BENCH --device=$device --seq_len="$len" \
      >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
    note "spattn-bench $device $len rc=$?"
  done
done
echo "=== failures"
grep -hE "^\[  FAILED|Failure|error:" "$OUT"/test_*.log | head -30
echo "=== bench (index and kernel: wall ms of the worker's build + stats and of its attend)"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r.get("method"), r.get("seq_len"))
    mode = "host" if "host-index" in r.get("device", "") else "worker"
    rows.setdefault(key, {})[mode] = r
for (m, n), d in sorted(rows.items(), key=lambda x: (x[0][1] or 0, str(x[0][0]))):
    out = []
    for mode in ("worker", "host"):
        r = d.get(mode)
        if r is None: out.append("%s -" % mode); continue
        if "error" in r: out.append("%s ERROR %s" % (mode, r["error"][:100])); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        out.append("%s index %8.2f kernel %8.2f total %8.2f" % (mode, b, k, b + k))
    w, h = d.get("worker"), d.get("host")
    saved = ""
    if w and h and "error" not in w and "error" not in h:
        tw = w["index_build_ms"] + w["kernel_ms"]; th = h["index_build_ms"] + h["kernel_ms"]
        saved = " saved %.2f ms (%.0f%%) density %.3f/%.3f recall %.3f/%.3f" % (
            th - tw, 100 * (th - tw) / th if th else 0, w["density"], h["density"], w["recall"], h["recall"])
    print("%-16s %7s | %s |%s" % (m, n, " | ".join(out), saved))
PY
tail -5 "$OUT/bench.err"
cat "$OUT/summary.txt"
