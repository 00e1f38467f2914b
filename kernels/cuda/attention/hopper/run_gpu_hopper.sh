#!/usr/bin/env bash
# One GPU-machine run for the Hopper kernels (variant 5): SASS/resource check of the hopper
# kernels, the GPU tests (optionally filtered), cuda_bench over the given shapes and PyTorch SDPA
# (cuDNN + flash) on the same shapes. Layout as kernels/cuda/gpu/pack_gpu.sh makes it.
# Usage: [TEST_FILTER=...] [BENCH_SETS="flags;flags"] [SDPA_SETS="flags;flags"]
#   [MINFERENCE_ARGS="--seq_lens ..."] run_gpu_hopper.sh
set -u
cd "$(dirname "$0")"
HERE=$PWD
if [ -f bundle.tar.xz ]; then
  WORK=/tmp/spattn_gpu_h3 && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
  cp "$HERE"/*.py "$WORK/" 2>/dev/null; [ -d "$HERE/ref" ] && cp -r "$HERE/ref" "$WORK/"
  cd "$WORK"
fi
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass -arch sm_90a bin/cuda_bench 2>/dev/null |
    awk '/Function :/ {if (f) printf "%s HGMMA=%d UTMALDG=%d SETMAXREG=%d BAR=%d LDL=%d STL=%d\n", f, g, t, r, b, l, s;
                       f=$3; g=t=r=b=l=s=0}
         /HGMMA/ {g++} /UTMALDG/ {t++} /USETMAXREG/ {r++} / BAR\./ {b++} / LDL/ {l++} / STL/ {s++}
         END {if (f) printf "%s HGMMA=%d UTMALDG=%d SETMAXREG=%d BAR=%d LDL=%d STL=%d\n", f, g, t, r, b, l, s}' |
    grep -i "hopper\|Fa3" | cut -c1-200 > "$OUT/sass_hopper.txt"
  cuobjdump --dump-resource-usage bin/cuda_bench 2>/dev/null | grep -A1 -i "Fa3" | grep -o "REG:[0-9]*\|STACK:[0-9]*\|SHARED:[0-9]*\|LOCAL:[0-9]*" | paste -sd' ' >> "$OUT/sass_hopper.txt"
fi
FILTER=${TEST_FILTER:-*}
{ timeout ${TEST_TIMEOUT:-200} bin/attention_cuda_test --gtest_filter="$FILTER"; echo "attention_cuda_test rc=$?"; } > "$OUT/tests.log" 2>&1
if [ -z "${SKIP_ENGINE_TEST:-}" ]; then
  { timeout 60 bin/cuda_engine_test; echo "cuda_engine_test rc=$?"; } >> "$OUT/tests.log" 2>&1
fi
: > "$OUT/bench.jsonl"
IFS=';' read -ra SETS <<< "${BENCH_SETS:-}"
for s in "${SETS[@]}"; do
  [ -n "$s" ] || continue
  timeout ${BENCH_TIMEOUT:-120} bin/cuda_bench $s >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  echo "cuda_bench $s rc=$?" >> "$OUT/errors.log"
done
: > "$OUT/sdpa.jsonl"
IFS=';' read -ra SSETS <<< "${SDPA_SETS:-}"
for s in "${SSETS[@]}"; do
  [ -n "$s" ] || continue
  PYTHONUNBUFFERED=1 timeout ${SDPA_TIMEOUT:-120} python3 sdpa_reference.py --ours "$OUT/bench.jsonl" $s \
    >> "$OUT/sdpa.jsonl" 2>> "$OUT/errors.log"
  echo "sdpa $s rc=$?" >> "$OUT/errors.log"
done
# MInference's public Triton block-sparse kernel (fetched, carried in ref/, never committed).
if [ -d ref ] && [ -n "${MINFERENCE_ARGS:-}" ]; then
  PYTHONUNBUFFERED=1 timeout ${REF_TIMEOUT:-90} python3 minference_reference.py --ref_dir ref \
    $MINFERENCE_ARGS > "$OUT/minference.jsonl" 2>> "$OUT/errors.log"
  echo "minference rc=$?" >> "$OUT/errors.log"
fi
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== sass"; cat "$OUT/sass_hopper.txt" 2>/dev/null
echo "=== tests"; grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|rc=" "$OUT/tests.log" | cut -c1-160 | head -40
grep -hE "Failure|error:|Expected|Which is|bound|not written|config" "$OUT/tests.log" | cut -c1-300 | head -20
echo "=== bench"; cut -c1-230 "$OUT/bench.jsonl"
echo "=== sdpa"; grep -v '"best_dense"' "$OUT/sdpa.jsonl" | cut -c1-230
echo "=== minference"; cat "$OUT/minference.jsonl" 2>/dev/null
echo "=== errors"; tail -8 "$OUT/errors.log" 2>/dev/null
