#!/usr/bin/env bash
# One GPU-machine run of the GPU index builders of vertical_slash, block_sparse and flex_prefill:
# their tests against the CPU twins, the engine tests, and spattn-bench --device=cuda at 32K and
# 128K (llm_mix, 32 q / 8 kv heads, d 128, bf16). Expects pack_gpu.sh's layout with
# BINS="cuda_engine_test merged_builders_test" and spattn-bench. Logs under $OUT (or /tmp/out);
# a short summary is printed last.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu_merged && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv > "$OUT/gpu.txt" 2>&1
SECONDS=0
{ timeout "${TEST_TIMEOUT:-100}" bin/merged_builders_test; echo "merged_builders_test rc=$?"; } \
  > "$OUT/tests.log" 2>&1
{ timeout 40 bin/cuda_engine_test; echo "cuda_engine_test rc=$?"; } >> "$OUT/tests.log" 2>&1
echo "tests done at ${SECONDS}s" >> "$OUT/summary.txt"
BENCH="--device=cuda --heads=32 --kv_heads=8 --head_dim=128 --group_by=all --recall_rows=64
  --methods=${BENCH_METHODS:-dense,vertical_slash,block_sparse,flex_prefill}"
for len in ${BENCH_LENS:-32768 131072}; do
  rep=3
  [ "$len" -gt 65536 ] && rep=2
  # Per-stage device times of every build go to bench.err (merged profile lines).
  echo "=== seq_len $len" >> "$OUT/bench.err"
  SPATTN_GPU_BUILDER_PROFILE=1 timeout "${BENCH_TIMEOUT:-110}" bin/spattn-bench $BENCH \
    --seq_len="$len" --warmup=1 --repeat="$rep" >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
  echo "bench $len rc=$? at ${SECONDS}s" >> "$OUT/summary.txt"
done
# compute-sanitizer on small tests: MEMCHECK / RACECHECK are gtest filters.
for tool in memcheck racecheck; do
  filter=$([ "$tool" = memcheck ] && echo "${MEMCHECK:-}" || echo "${RACECHECK:-}")
  if [ -n "$filter" ] && command -v compute-sanitizer > /dev/null; then
    { timeout "${SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        bin/merged_builders_test --gtest_filter="$filter"; echo "$tool rc=$?"; } \
      > "$OUT/$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$OUT/$tool.log" | tail -4 \
      >> "$OUT/summary.txt"
    echo "$tool done at ${SECONDS}s" >> "$OUT/summary.txt"
  fi
done

echo "=== tests"
grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|rc=" "$OUT/tests.log" | head -40
grep -hE "Failure|error|Expected|Which is|identical|near-tie|gaussian:|long:" "$OUT/tests.log" |
  cut -c1-300 | head -60
echo "=== bench"
python3 - "$OUT/bench.jsonl" <<'PY' 2>/dev/null || cut -c1-300 "$OUT/bench.jsonl"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r["seq_len"], "ERROR", r["error"][:200]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-15s %6d index %8.3f ms kernel %9.3f ms share %5.1f%% density %.4f recall %.4f/%.4f" %
          (r["method"], r["seq_len"], b, k, 100 * b / max(b + k, 1e-9), r["density"], r["recall"],
           r["recall_min"]))
PY
grep -v "^merged profile" "$OUT/bench.err" | tail -4
echo "=== builder stages (ms, last build of each method and length)"
awk '/^=== seq_len/ {len=$3} /^merged profile/ {last[len " " $3]=$0}
     END {for (k in last) print k, last[k]}' "$OUT/bench.err" | sort | cut -c1-420
echo "=== summary"; cat "$OUT/summary.txt"
