#!/usr/bin/env bash
# One GPU-machine run of the sample_attention / anchor / saap GPU builders: SASS statistics of
# their kernels, assembled_builders_test (and cuda_engine_test when packed), then spattn-bench
# --device=cuda on llm_mix (32 q / 8 kv heads, d 128, bf16) at the lengths in BENCH_LENS.
# Expects pack_gpu.sh's bundle (PACK_BINS="assembled_builders_test cuda_engine_test"). Logs go to
# $OUT (at most 8 files come back); a short summary is printed last.
# Usage: [BENCH_LENS="32768 131072"] [BENCH_ARGS=...] [BENCH_PROFILE=1: per-stage build times]
#        [TEST_FILTER=...] run_gpu_assembled_builders.sh
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_gpu_assembled && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv > "$OUT/gpu.txt" 2>&1
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass -arch sm_90a bin/assembled_builders_test > /tmp/sass_assembled.txt 2>&1
  awk '/Function :/ {if (f) printf "%s HMMA=%d LDSM=%d LDGSTS=%d LDL=%d STL=%d\n", f, h, m, c, l, s;
                     f=$3; h=m=c=l=s=0}
       /HMMA/ {h++} /LDSM/ {m++} /LDGSTS/ {c++} / LDL/ {l++} / STL/ {s++}
       END {if (f) printf "%s HMMA=%d LDSM=%d LDGSTS=%d LDL=%d STL=%d\n", f, h, m, c, l, s}' \
    /tmp/sass_assembled.txt | grep -E "assembled" | sed 's/_ZN6spattn4cuda7bdetail//' | cut -c1-150 \
    > "$OUT/sass_assembled.txt"
fi
{ timeout "${TEST_TIMEOUT:-200}" bin/assembled_builders_test --gtest_filter="${TEST_FILTER:-*}";
  echo "assembled_builders_test rc=$?"; } > "$OUT/tests.log" 2>&1
if [ -x bin/cuda_engine_test ]; then
  { timeout 60 bin/cuda_engine_test; echo "cuda_engine_test rc=$?"; } >> "$OUT/tests.log" 2>&1
fi
for len in ${BENCH_LENS:-32768 131072}; do
  rows=256
  [ "$len" -gt 65536 ] && rows=128
  SPATTN_GPU_BUILDER_PROFILE=${BENCH_PROFILE:-} timeout "${BENCH_TIMEOUT:-150}" bin/spattn-bench --device=cuda --seq_len="$len" --heads=32 \
    --kv_heads=8 --head_dim=128 --methods=sample_attention,anchor,saap --group_by=all \
    --warmup=1 --repeat=3 --recall_rows="$rows" --calibrate --calibrate_steps=30 \
    ${BENCH_ARGS:-} >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
  echo "spattn-bench $len rc=$?" >> "$OUT/bench.err"
done
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== sass"; cat "$OUT/sass_assembled.txt" 2>/dev/null | head -30
echo "=== tests"
grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|rc=" "$OUT/tests.log" | head -40
grep -hE "Failure|error:|Expected|Which is|actual|rows differ|recall cpu" "$OUT/tests.log" |
  grep -vE " 0/[0-9]+ rows differ" | cut -c1-300 | head -40
echo "=== bench"
grep -v "^gpu builder" "$OUT/bench.err" | cut -c1-300 | tail -12
echo "--- last stage profile per method and length"
awk '/^spattn-bench: workload/ {len=$7} /^gpu builder/ {last[len" "$3]=$0} END {for (k in last) print last[k]}' \
  "$OUT/bench.err" | sort | cut -c1-250
python3 - "$OUT/bench.jsonl" <<'PY' 2>/dev/null || cut -c1-400 "$OUT/bench.jsonl"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r["seq_len"], "ERROR", r["error"][:200]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print(f'{r["method"]:17s} {r["seq_len"]:7d} index {b:8.2f} ms kernel {k:8.2f} ms '
          f'build share {b / (b + k):.3f} density {r["density"]:.3f} recall {r["recall"]:.3f} '
          f'l2 {r["rel_l2_error"]:.3g}')
PY
