#!/usr/bin/env bash
# s21-sparse run 1: attention GPU tests of the new build (default = dynamic work list; the sparse
# cases again under SPATTN_HOPPER_PACK_TAILS=1), base (main 11899f0, bin/base/) and new
# cuda_bench processes back to back (32K base, new, base again; 128K base, new; block_m 64 and
# 128; synthetic ranges / columns, the dense index, the sampled_lines index gamma 0.95), new
# under knob sets def (dynamic) / dyn0 (SPATTN_HOPPER_DYNAMIC=0: the snake order), 2 rounds at
# 32K; last, ncu of the new build: SM-active spread and stall reasons of the sparse launches at
# 32K (dense index, ranges 0.03, columns 0.05, sampled_lines; block_m 64 / 128), then the
# source-level stall profile of block_m 128 ranges 0.03.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/s21sp1 && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/clocks.csv" 2>/dev/null &
CLK=$!
timeout 150 bin/attention_cuda_test > "$OUT/test_attention_cuda_test.log" 2>&1
note "attention_cuda_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_attention_cuda_test.log" | tr '\n' ' ')"
F='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
SPATTN_HOPPER_PACK_TAILS=1 timeout 90 bin/attention_cuda_test --gtest_filter="$F" > "$OUT/test_knob.log" 2>&1
note "attention_cuda_test [SPATTN_HOPPER_PACK_TAILS=1] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_knob.log" | tr '\n' ' ')"
cat "$OUT/test_knob.log" >> "$OUT/test_attention_cuda_test.log"; rm -f "$OUT/test_knob.log"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16"
C="$S --variants=5 --sparse_variants=5 --block_ms=64,128 --sampled_lines=0.95 --workspace_mb=8192"
C32="--seq_lens=32768 --iters=5 --warmup=1 --range_densities=0.03,0.1,0.3,0.5 --col_densities=0.05,0.3"
C128="--seq_lens=131072 --iters=3 --warmup=1 --range_densities=0.03,0.1,0.3 --col_densities=0.05"
KB='--knob_sets=def: --sparse_knobs=1'
KN='--knob_sets=def:;dyn0:SPATTN_HOPPER_DYNAMIC=0 --sparse_knobs=1'
timeout 120 bin/base/cuda_bench $C $C32 $KB --rounds=2 --tag=base >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base 32K rc=$?"
timeout 120 bin/cuda_bench $C $C32 $KN --rounds=2 --tag=new >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "new 32K rc=$?"
timeout 120 bin/base/cuda_bench $C $C32 $KB --tag=base2 >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base2 32K rc=$?"
timeout 150 bin/base/cuda_bench $C $C128 $KB --tag=base >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base 128K rc=$?"
timeout 150 bin/cuda_bench $C $C128 $KN --tag=new >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "new 128K rc=$?"
if command -v ncu > /dev/null; then
  # Launches (PersistentFa3Kernel only) in order: block_m 64 dense index, ranges 0.03, columns
  # 0.05; block_m 128 the same; sampled_lines block_m 64, 128.
  timeout 120 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-count 8 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,lts__t_sector_hit_rate.pct,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    bin/cuda_bench $S --seq_lens=32768 --variants=5 --sparse_variants=5 --block_ms=64,128 \
    --range_densities=0.03 --col_densities=0.05 --sampled_lines=0.95 --iters=1 --warmup=0 \
    --workspace_mb=8192 > "$OUT/ncu.txt" 2>&1
  note "ncu rc=$?"
  # Source-level stall samples of block_m 128 ranges 0.03 (second PersistentFa3Kernel launch).
  timeout 90 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters -o "$WORK/src" -f \
    bin/cuda_bench $S --seq_lens=32768 --variants=5 --sparse_variants=5 --block_ms=128 \
    --range_densities=0.03 --col_densities=0.05 --sampled_lines=0 --iters=1 --warmup=0 \
    --workspace_mb=2048 > "$OUT/ncu_src_log.txt" 2>&1
  note "ncu src rc=$?"
  timeout 30 ncu --import "$WORK/src.ncu-rep" --print-details all > "$OUT/ncu_src.txt" 2>&1
  timeout 40 ncu --import "$WORK/src.ncu-rep" --page source --csv --print-source sass > "$WORK/sass.csv" 2>&1
  note "ncu sass rc=$? $(wc -c < "$WORK/sass.csv") bytes"
  head -c 2000 "$WORK/sass.csv" > "$OUT/sass_head.txt"
  xz -9 -c "$WORK/sass.csv" > "$OUT/sass.csv.xz"
else
  note "no ncu"
fi
kill $CLK 2>/dev/null
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/table.txt"
cd "$OUT" && cat test_*.log > tests.txt && rm -f test_*.log
