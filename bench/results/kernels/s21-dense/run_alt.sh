#!/usr/bin/env bash
# s21-dense device run (s20-dense's run_alt.sh with per-item rounds): the GPU tests, then per
# item SDPA (cuDNN), N rounds of short alternating cuda_bench processes (one per variant,
# ALT_SLEEP s apart), SDPA again unless the item says 1 pass.
# Layout as kernels/cuda/gpu/pack_gpu.sh makes it (bundle.tar.xz + this script + the .py files).
# Env: TESTS (TEST_ARGS: flags for each, e.g. a --gtest_filter),
# ITEMS="SHAPE|VARIANTS|ROUNDS|SDPA_PASSES@..." with VARIANTS "name:binary:ENV=..,name:binary:"
# (ENV space-free, ',' separated variants), ROUNDS (default ALT_N, 3), SDPA_PASSES 1 or 2
# (default 2), ALT_SLEEP.
# Outputs under $OUT (7 files: the device tool returns at most 8): summary.txt (the GPU first),
# clocks.csv, tests.log, sdpa.jsonl, bench.jsonl (tag alt<i>-<variant>), errors.log, cells.txt.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/s21dense && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp "$HERE"/*.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader | tee "$OUT/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,noheader -l 1 > "$OUT/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
for t in ${TESTS:-}; do
  timeout "${TEST_TIMEOUT:-150}" "bin/$t" ${TEST_ARGS:-} > "$WORK/test.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$WORK/test.log" | tail -2 | tr '\n' ' ')"
  cat "$WORK/test.log" >> "$OUT/tests.log"
done
sdpa() {
  PYTHONUNBUFFERED=1 timeout 200 python3 sdpa_reference.py "$@" --backends cudnn \
    > "$WORK/sdpa_part.jsonl" 2>> "$OUT/errors.log"
  local rc=$?
  cat "$WORK/sdpa_part.jsonl" >> "$OUT/sdpa.jsonl"
  note "sdpa $* rc=$rc"
}
EXTRA="--variants=5 --sparse_variants= --block_ms="
IFS='@' read -ra ITEM_LIST <<< "${ITEMS:-}"
for item in "${ITEM_LIST[@]}"; do
  [ -n "$item" ] || continue
  IFS='|' read -r shape variants rounds passes <<< "$item"
  IFS=',' read -ra VLIST <<< "$variants"
  sdpa $shape
  for i in $(seq "${rounds:-${ALT_N:-3}}"); do
    for v in "${VLIST[@]}"; do
      IFS=':' read -r name bin envs <<< "$v"
      sleep "${ALT_SLEEP:-1}"
      env $envs timeout 200 "bin/$bin" $shape $EXTRA --tag="alt$i-$name" \
        --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
      note "$name $shape alt$i rc=$?"
    done
  done
  if [ "${passes:-2}" != 1 ]; then
    sleep "${ALT_SLEEP:-1}"
    sdpa $shape
  fi
done
kill "$CLOCKS_PID" 2>/dev/null
python3 cells.py "$OUT" | tee "$OUT/cells.txt"
echo "=== tests"; grep -hE "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -20
echo "=== errors"; grep -v "^cuda_bench on" "$OUT/errors.log" 2>/dev/null | tail -8
cat "$OUT/summary.txt"
