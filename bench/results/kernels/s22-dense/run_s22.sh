#!/usr/bin/env bash
# s22-dense device run: the dense GPU tests, the 32K non-causal cells under interleaved knob sets
# (one cuda_bench process, cuda_bench --knob_sets --rounds) between two SDPA (cuDNN) passes, per-
# launch-window SM clock / power of ours and SDPA's bf16 vs fp16 on one cell, optional 512K cells.
# Layout as kernels/cuda/gpu/pack_gpu.sh makes it (bundle.tar.xz + this script + the .py files).
# Env: TEST_FILTER (attention_cuda_test's --gtest_filter; empty: no tests), ENGINE_TEST=1,
#   ITEM32 (1: the 32K knob-set item), SETS (its knob sets), ROUNDS, CLOCK (1: the clock item),
#   ITEMS512 ("SHAPE@SHAPE": per shape one SDPA pass and one cuda_bench process), SAMPLE_MS.
# Outputs under $OUT: summary.txt (GPU, marks), clocks.csv, tests.log, sdpa.jsonl, bench.jsonl,
# errors.log, cells.txt.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/s22dense && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp "$HERE"/*.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
# Marks carry nvidia-smi's timestamp format (local time) so clocks.py can cut clocks.csv.
note() { echo "$(date +'%Y/%m/%d %H:%M:%S.%3N') | $* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader | tee "$OUT/summary.txt"
FIELDS=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader > /dev/null 2>&1 ||
  FIELDS=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
echo "clocks fields: $FIELDS" | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader -lms "${SAMPLE_MS:-50}" \
  > "$OUT/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
if [ -n "${TEST_FILTER:-}" ]; then
  timeout 150 bin/attention_cuda_test --gtest_filter="$TEST_FILTER" > "$WORK/test.log" 2>&1
  note "attention_cuda_test [$TEST_FILTER] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$WORK/test.log" | tail -2 | tr '\n' ' ')"
  cat "$WORK/test.log" >> "$OUT/tests.log"
fi
if [ "${ENGINE_TEST:-0}" = 1 ]; then
  timeout 100 bin/cuda_engine_test > "$WORK/test.log" 2>&1
  note "cuda_engine_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$WORK/test.log" | tail -2 | tr '\n' ' ')"
  cat "$WORK/test.log" >> "$OUT/tests.log"
fi
sdpa() {
  note "start sdpa $*"
  PYTHONUNBUFFERED=1 timeout 250 python3 sdpa_reference.py "$@" --backends cudnn \
    > "$WORK/sdpa_part.jsonl" 2>> "$OUT/errors.log"
  local rc=$?
  cat "$WORK/sdpa_part.jsonl" >> "$OUT/sdpa.jsonl"
  note "end sdpa $* rc=$rc"
}
ours() {  # ours TAG ENV... -- FLAGS...
  local tag=$1; shift
  note "start ours $tag $*"
  timeout 250 env "$@" --variants=5 --sparse_variants= --block_ms= --tag="$tag" \
    --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "end ours $tag rc=$?"
}
EXTRA_SETS=${SETS:-"new:;old:SPATTN_HOPPER_L2_MB=32;bn128:SPATTN_HOPPER_FULL_BN=128+SPATTN_HOPPER_D64_WGS=2;bn128s3:SPATTN_HOPPER_FULL_BN=128+SPATTN_HOPPER_D128_STAGES=3"}
if [ "${ITEM32:-1}" = 1 ]; then
  S32=${S32:-"--seq_lens=32768 --kv_heads=8,32 --head_dim=64,128 --causal=0 --dtype=bf16,fp16 --iters=5 --warmup=1"}
  sdpa $S32
  ours r bin/cuda_bench $S32 --knob_sets="$EXTRA_SETS" --rounds="${ROUNDS:-3}"
  sleep 0.5
  sdpa $S32
fi
if [ "${CLOCK:-1}" = 1 ]; then
  CELL="--seq_lens=32768 --kv_heads=8 --head_dim=128 --causal=0 --iters=40 --warmup=3"
  for dt in bf16 fp16 bf16 fp16; do
    sleep 1
    ours "clk-$dt" bin/cuda_bench $CELL --dtype=$dt
  done
  for dt in bf16 fp16; do
    sleep 1
    sdpa $CELL --dtype=$dt
  done
fi
IFS='@' read -ra L512 <<< "${ITEMS512:-}"
for shape in "${L512[@]}"; do
  [ -n "$shape" ] || continue
  sdpa $shape
  ours r512 bin/cuda_bench $shape
done
kill "$CLOCKS_PID" 2>/dev/null
python3 cells.py "$OUT" | tee "$OUT/cells.txt"
echo "=== tests"; grep -hE "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -20
echo "=== errors"; grep -v "^cuda_bench on" "$OUT/errors.log" 2>/dev/null | tail -8
cat "$OUT/summary.txt"
