#!/usr/bin/env bash
# One GPU-machine run of the CUDA kernels: SASS check, tests, benchmark, PyTorch SDPA reference.
# Expects the layout pack_gpu.sh makes: bin/ (binaries), lib/ (non-system shared libs),
# sdpa_reference.py. Writes logs under $OUT (or /tmp/out) and prints a short summary last.
# Usage: [SDPA_ARGS=...] [SPATTN_BENCH_ARGS=...] run_gpu.sh [cuda_bench flags...]
set -u
cd "$(dirname "$0")"
if [ -f bundle.tar.xz ]; then
  WORK=/tmp/spattn_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
  cp sdpa_reference.py "$WORK/" && cd "$WORK"
fi
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv | tee "$OUT/gpu.txt"

# SASS: tensor-core instructions and local-memory traffic per kernel (sm_90a image).
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass -arch sm_90a bin/cuda_bench > /tmp/sass.txt 2>&1
  awk '/Function :/ {if (f) printf "%s HMMA=%d HGMMA=%d LDSM=%d LDGSTS=%d LDL=%d STL=%d\n", f, h, g, m, c, l, s;
                     f=$3; h=g=m=c=l=s=0}
       /HMMA/ {h++} /HGMMA/ {g++} /LDSM/ {m++} /LDGSTS/ {c++} / LDL/ {l++} / STL/ {s++}
       END {if (f) printf "%s HMMA=%d HGMMA=%d LDSM=%d LDGSTS=%d LDL=%d STL=%d\n", f, h, g, m, c, l, s}' \
    /tmp/sass.txt | sed 's/_ZN6spattn4cuda6detail//' | cut -c1-160 > "$OUT/sass_summary.txt"
fi

# At most 8 files come back: tests.log, bench.jsonl, sdpa.jsonl, spattn_bench.jsonl, errors.log,
# gpu.txt, sass_summary.txt, summary.txt.
{ timeout 330 bin/attention_cuda_test; echo "attention_cuda_test rc=$?"; } > "$OUT/tests.log" 2>&1
tail -1 "$OUT/tests.log" >> "$OUT/summary.txt"
{ timeout 60 bin/cuda_engine_test; echo "cuda_engine_test rc=$?"; } >> "$OUT/tests.log" 2>&1
tail -1 "$OUT/tests.log" >> "$OUT/summary.txt"
timeout 240 bin/cuda_bench "$@" > "$OUT/bench.jsonl" 2> "$OUT/errors.log"; echo "cuda_bench rc=$?" >> "$OUT/summary.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 sdpa_reference.py --ours "$OUT/bench.jsonl" ${SDPA_ARGS:-} \
  > "$OUT/sdpa.jsonl" 2>> "$OUT/errors.log"; echo "sdpa rc=$?" >> "$OUT/summary.txt"
if [ -x bin/spattn-bench ] && [ -n "${SPATTN_BENCH_ARGS:-}" ]; then
  timeout 200 bin/spattn-bench --device=cuda $SPATTN_BENCH_ARGS > "$OUT/spattn_bench.jsonl" \
    2>> "$OUT/errors.log"; echo "spattn-bench rc=$?" >> "$OUT/summary.txt"
fi

echo "=== sass"; cat "$OUT/sass_summary.txt" 2>/dev/null | head -40
echo "=== tests"; grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED" "$OUT/tests.log" | sort | uniq -c | sort -rn | head -40
grep -hE "Failure|error:|Expected|Which is|bound|not written" "$OUT/tests.log" | cut -c1-400 | head -30
echo "=== bench"; cut -c1-200 "$OUT/bench.jsonl"; tail -3 "$OUT/errors.log"
echo "=== sdpa"; cat "$OUT/sdpa.jsonl"
echo "=== spattn-bench"; cut -c1-330 "$OUT/spattn_bench.jsonl" 2>/dev/null
echo "=== summary"; cat "$OUT/summary.txt"
