#!/usr/bin/env bash
# One GPU-machine run of the CUDA kernels: SASS check, tests, benchmark, PyTorch SDPA reference.
# Expects the layout pack_gpu.sh makes: bin/ (binaries), lib/ (non-system shared libs),
# sdpa_reference.py. Writes logs under $OUT (or /tmp/out) and prints a short summary last.
# Usage: run_gpu.sh [bench flags...]
set -u
cd "$(dirname "$0")"
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

timeout 330 bin/attention_cuda_test > "$OUT/test.log" 2>&1; echo "attention_cuda_test rc=$?" >> "$OUT/summary.txt"
timeout 60 bin/cuda_engine_test > "$OUT/engine_test.log" 2>&1; echo "cuda_engine_test rc=$?" >> "$OUT/summary.txt"
timeout 200 bin/cuda_bench "$@" > "$OUT/bench.jsonl" 2> "$OUT/bench.err"; echo "cuda_bench rc=$?" >> "$OUT/summary.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 sdpa_reference.py --ours "$OUT/bench.jsonl" \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; echo "sdpa rc=$?" >> "$OUT/summary.txt"

echo "=== sass"; cat "$OUT/sass_summary.txt" 2>/dev/null | grep -v "Kernel\b" | head -30
echo "=== tests"; grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED" "$OUT/test.log" "$OUT/engine_test.log" | sort | uniq -c | sort -rn | head -40
grep -hE "Failure|error:|Expected|Which is|bound|not written" "$OUT/test.log" "$OUT/engine_test.log" | cut -c1-400 | head -40
echo "=== bench"; cat "$OUT/bench.jsonl" | cut -c1-260; tail -3 "$OUT/bench.err"
echo "=== sdpa"; cat "$OUT/sdpa.jsonl"; tail -3 "$OUT/sdpa.err"
echo "=== summary"; cat "$OUT/summary.txt"
