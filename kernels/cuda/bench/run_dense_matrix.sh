#!/usr/bin/env bash
# Issue 10 item 1 in one device run: the dense kernel against PyTorch SDPA (cuDNN) over a shape
# matrix, both sides in the same run and in the same clock / power / temperature state, with the
# SM clock sampled through the whole run. Per group of shapes (MODE=pairs, the default):
# dense_pairs.py runs the cells one by one (kv_heads, head_dim, causal, dtype, then seq_lens
# innermost), each cell SDPA and ours back to back in alternating order (SDPA in this Python
# process, ours in one cuda_bench --serve=1 process); MODE=passes: one sdpa_reference.py pass
# over the group, then one cuda_bench pass (ORDER). Each cell is warmed up for WARMUP_MS of
# kernel time and timed over about TARGET_MS (at least ITERS launches; the 700 W cap settles
# within a second or two of busy GPU, kernels/cuda/NOTES.md s22-dense). nvidia-smi samples
# clocks.sm / power / temperature / clock-event reasons every SAMPLE_MS; dense_matrix.py cuts
# them per cell by the lines' "t0" / "t1" and prints one table: cell, ours ms, cuDNN ms, ratio,
# TFLOP/s, each side's median SM clock.
# Layout as kernels/cuda/gpu/pack_gpu.sh makes it (bundle.tar.xz + this script + the .py files).
#
# Env:
#   CELL_GROUPS="SHAPE[|SETS[|TIMING]]@..." (default: the 48 cells at 8K / 32K / 128K, then
#     16K / 64K d64 non-causal with the sets "new:;l2mb32:SPATTN_HOPPER_L2_MB=32"), SHAPE as flags
#     both take (--seq_lens= --kv_heads= --head_dim= --causal= --dtype=), SETS the group's
#     cuda_bench --knob_sets (else KNOB_SETS), TIMING the group's timing flags for both sides
#     in place of the ITERS / WARMUP / ... ones below (e.g. 512K: "--warmup=1 --iters=1
#     --warmup_ms=0 --target_ms=0"). 512K (~2.5-9 s a launch, so one warm-up and one timed
#     launch a cell; 16 cells ~350 s) and all 72 cells in one call: run_dense_all.sh
#     (kernels/cuda/NOTES.md, sessions 23 and 24 s23-dense / s24-dense).
#   ITERS (3), WARMUP (1), WARMUP_MS (250), TARGET_MS (600), MAX_ITERS (400), PRESLEEP_US (150:
#     where >= 10 launches are timed, every other SDPA launch is queued behind a GPU sleep so its
#     events time cuDNN's kernel alone: "ms_gpu"; the table's ratio uses "ms", launch latency
#     inside the events on both sides as in cuda_bench).
#   HEAT: cuda_bench flags of a ~3 s load before everything (default a 32K cell x 80; empty: none).
#   MODE (pairs | passes), PAIRS_TIMEOUT (500 s a group). ORDER (passes: "sdpa ours"; e.g.
#     "sdpa ours sdpa" for a second SDPA pass, the table takes the last).
#   KNOB_SETS / ROUNDS: cuda_bench --knob_sets / --rounds (an A/B of our knobs per cell,
#     interleaved; the first set is the table's), OURS_ENV: variables for cuda_bench.
#   TEST_FILTER: attention_cuda_test --gtest_filter first (empty: no tests). SAMPLE_MS (25).
#   SDPA_TIMEOUT / BENCH_TIMEOUT per process (300).
# Outputs under $OUT: summary.txt (GPU, marks), clocks.csv, sdpa.jsonl, bench.jsonl, errors.log,
# tests.log, heat.jsonl, table.txt, table.csv.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/spattn_dense && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp "$HERE"/*.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$(date -u +'%H:%M:%S.%3N') | $* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader | tee "$OUT/summary.txt"
FIELDS=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader > /dev/null 2>&1 ||
  FIELDS=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
echo "clocks fields: $FIELDS" | tee -a "$OUT/summary.txt"
echo "epoch $(date +%s.%N)" >> "$OUT/summary.txt"
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader -lms "${SAMPLE_MS:-25}" \
  > "$OUT/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
if [ -n "${TEST_FILTER:-}" ]; then
  timeout 150 bin/attention_cuda_test --gtest_filter="$TEST_FILTER" > "$OUT/tests.log" 2>&1
  note "attention_cuda_test [$TEST_FILTER] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -2 | tr '\n' ' ')"
fi
TIMING="--warmup=${WARMUP:-1} --iters=${ITERS:-3} --warmup_ms=${WARMUP_MS:-250}"
TIMING="$TIMING --target_ms=${TARGET_MS:-600} --max_iters=${MAX_ITERS:-400}"
# A few seconds of load first, so that the first cells of the first pass do not run on a cool,
# uncapped GPU (heat.jsonl, not in the table).
HEAT=${HEAT-"--seq_lens=32768 --kv_heads=8 --head_dim=128 --causal=0 --dtype=bf16 --iters=80 --warmup=1"}
if [ -n "$HEAT" ]; then
  note "start heat $HEAT"
  timeout 60 bin/cuda_bench $HEAT --variants=5 --sparse_variants= --block_ms= --tag=heat \
    > "$OUT/heat.jsonl" 2>> "$OUT/errors.log"
  note "end heat rc=$?"
fi
DEFAULT_GROUPS="--seq_lens=8192,32768,131072 --kv_heads=8,32 --head_dim=64,128 --causal=0,1 --dtype=bf16,fp16"
DEFAULT_GROUPS="$DEFAULT_GROUPS@--seq_lens=16384,65536 --kv_heads=8,32 --head_dim=64 --causal=0 --dtype=bf16,fp16|new:;l2mb32:SPATTN_HOPPER_L2_MB=32"
: > "$OUT/sdpa.jsonl"
: > "$OUT/bench.jsonl"
IFS='@' read -ra GROUP_LIST <<< "${CELL_GROUPS:-$DEFAULT_GROUPS}"
g=0
for group in "${GROUP_LIST[@]}"; do
  IFS='|' read -r shape sets gtiming <<< "$group"
  [ -n "$shape" ] || continue
  sets=${sets:-${KNOB_SETS:-}}
  timing=${gtiming:-$TIMING}
  g=$((g + 1))
  if [ "${MODE:-pairs}" = pairs ]; then
    note "start pairs g$g $shape [${OURS_ENV:-}] ${sets:+sets $sets} ${gtiming:+timing $gtiming}"
    BENCH="env ${OURS_ENV:-} bin/cuda_bench $timing --variants=5 --sparse_variants= --block_ms="
    BENCH="$BENCH --tag=g$g ${sets:+--knob_sets=$sets --rounds=${ROUNDS:-1}}"
    PYTHONUNBUFFERED=1 timeout "${PAIRS_TIMEOUT:-500}" python3 dense_pairs.py $shape $timing \
      --presleep_us="${PRESLEEP_US:-150}" --backends cudnn --bench="$BENCH" \
      --sdpa_out="$OUT/sdpa.jsonl" --bench_out="$OUT/bench.jsonl" 2>> "$OUT/errors.log"
    note "end pairs g$g rc=$?"
    continue
  fi
  : > "$WORK/sdpa_part.jsonl"
  for side in ${ORDER:-sdpa ours}; do
    if [ "$side" = sdpa ]; then
      note "start sdpa g$g $shape"
      PYTHONUNBUFFERED=1 timeout "${SDPA_TIMEOUT:-300}" python3 sdpa_reference.py $shape $timing \
        --presleep_us="${PRESLEEP_US:-150}" --backends cudnn > "$WORK/sdpa_new.jsonl" \
        2>> "$OUT/errors.log"
      note "end sdpa g$g rc=$? lines=$(grep -c '^{' "$WORK/sdpa_new.jsonl")"
      cat "$WORK/sdpa_new.jsonl" >> "$OUT/sdpa.jsonl"
      cat "$WORK/sdpa_new.jsonl" >> "$WORK/sdpa_part.jsonl"
    else
      note "start ours g$g $shape [${OURS_ENV:-}] ${sets:+sets $sets}"
      env ${OURS_ENV:-} timeout "${BENCH_TIMEOUT:-300}" bin/cuda_bench $shape $timing \
        --variants=5 --sparse_variants= --block_ms= --tag="g$g" \
        ${sets:+--knob_sets="$sets" --rounds="${ROUNDS:-1}"} \
        --sdpa="$WORK/sdpa_part.jsonl" >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
      note "end ours g$g rc=$?"
    fi
  done
done
kill "$CLOCKS_PID" 2>/dev/null
wait "$CLOCKS_PID" 2>/dev/null
python3 dense_matrix.py "$OUT" --csv | tee "$OUT/table.txt"
echo "=== tests"; grep -hE "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -20
echo "=== errors"; grep -v "^cuda_bench on" "$OUT/errors.log" 2>/dev/null | tail -8
cat "$OUT/summary.txt"
