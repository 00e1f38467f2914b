#!/usr/bin/env bash
# Issue 10 item 1's whole dense matrix against cuDNN in ONE device call (~500 s wall on an H100;
# kernels/cuda/NOTES.md, session 24 s24-dense): run_dense_matrix.sh's pair protocol over
#   g1  the 48 cells at 8K / 32K / 128K (bf16 / fp16 x causal / full x GQA 32/8 / MHA x d64 / d128;
#       ~117 s),
#   g2  16K / 64K d64 non-causal (8 cells, ~15 s; no knob A/B),
#   g3  the 16 cells at 512K with one warm-up and one timed launch a side (~350 s).
# Same layout and outputs as run_dense_matrix.sh (table.txt: all 72 rows). Env as
# run_dense_matrix.sh's (HEAT, SAMPLE_MS, OURS_ENV, ...), plus
#   GROUPS_EXTRA="SHAPE|SETS|TIMING@..." appended groups; T512 the 512K timing flags.
#   NCU=1: instead of the matrix, run_dense_ncu.sh on the 8K / 128K d128 non-causal cells
#     (ours vs cuDNN in SM cycles at ncu's held clock, one-pass profiles, ~60 s).
# Bundle: BINS="cuda_bench attention_cuda_test" kernels/cuda/gpu/pack_gpu.sh .device/NAME, then
# on the device: OUT=$OUT bash .device/NAME/run_dense_all.sh (carry .device/NAME).
set -u
cd "$(dirname "$0")"
T512=${T512:-"--warmup=1 --iters=1 --warmup_ms=0 --target_ms=0"}
if [ "${NCU:-0}" = 1 ]; then
  # Instead of the matrix: ours and cuDNN in SM cycles at ncu's held clock, one launch each, on
  # the cells that sit nearest 1.0 (8K and 128K d128 non-causal; ~60 s; ncu_table.txt).
  C=""
  for n in 8192 131072; do for kv in 8 32; do for dt in bf16 fp16; do
    C="$C@--seq_lens=$n --kv_heads=$kv --head_dim=128 --causal=0 --dtype=$dt"
  done; done; done
  S="--seq_lens=8192 --kv_heads=8,32 --head_dim=128 --causal=0 --dtype=bf16,fp16"
  S="$S@--seq_lens=131072 --kv_heads=8,32 --head_dim=128 --causal=0 --dtype=bf16,fp16"
  SECTIONS=${SECTIONS-} CELLS=${CELLS:-${C#@}} SDPA_SHAPES=${SDPA_SHAPES:-$S} SDPA_LAUNCHES=8 \
    METRICS=${METRICS:-gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second} \
    exec bash run_dense_ncu.sh
fi
G="--seq_lens=8192,32768,131072 --kv_heads=8,32 --head_dim=64,128 --causal=0,1 --dtype=bf16,fp16"
G="$G@--seq_lens=16384,65536 --kv_heads=8,32 --head_dim=64 --causal=0 --dtype=bf16,fp16"
G="$G@--seq_lens=524288 --kv_heads=8,32 --head_dim=64,128 --causal=0,1 --dtype=bf16,fp16||$T512"
[ -n "${GROUPS_EXTRA:-}" ] && G="$G@$GROUPS_EXTRA"
CELL_GROUPS="$G" exec bash run_dense_matrix.sh
