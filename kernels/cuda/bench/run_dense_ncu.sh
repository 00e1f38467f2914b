#!/usr/bin/env bash
# ncu of our dense kernel and cuDNN's SDPA kernel on the same cells, one launch each, at ncu's
# locked base SM clock (--clock-control base; CLOCK=none for the power-managed clock), so the two
# durations compare at equal clocks and without launch latency (issue 10 item 1; kernels/cuda/
# NOTES.md, session 24 s24-dense). Layout as kernels/cuda/gpu/pack_gpu.sh makes it.
#
# Env:
#   CELLS="SHAPE[|VAR=VALUE+VAR=VALUE...]@..." SHAPE as cuda_bench / sdpa_reference.py take it
#     (--seq_lens= --kv_heads= --head_dim= --causal= --dtype=); the optional knob list profiles
#     ours again under those variables (one more launch per list entry, ';'-separated lists).
#   SDPA_SHAPES="SHAPE@..." (default: CELLS' shapes; empty: none): cuDNN's kernel, every
#     launch of one sdpa_reference.py process per entry (--warmup 1 --iters 1: 2 launches per
#     combination; SDPA_LAUNCHES, default 2, must cover an entry's: 2 x its combinations).
#   SECTIONS, METRICS: ncu's. CLOCK (base).
# Outputs under $OUT: ncu.txt (every report, the marks with their rc), ncu_table.txt
# (dense_ncu_table.py: per cell ours vs cuDNN in SM cycles and in time). One pass per profile
# (~1 s + the launch): SECTIONS="" METRICS="gpu__time_duration.sum,sm__cycles_elapsed.max,
# sm__cycles_elapsed.avg.per_second"; the default sections take ~8 passes (128K: ~12 s ours).
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/spattn_dense
if [ ! -x "$WORK/bin/cuda_bench" ]; then
  rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
fi
cp "$HERE"/*.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then echo "no ncu" | tee "$OUT/ncu.txt"; exit 0; fi
SECTIONS=${SECTIONS-"LaunchStats SpeedOfLight Occupancy WarpStateStats"}
METRICS=${METRICS:-"gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_bytes.sum,sm__inst_executed_pipe_tensor.sum,smsp__inst_executed.sum"}
SEC_ARGS=""
for s in $SECTIONS; do SEC_ARGS="$SEC_ARGS --section $s"; done
CELLS=${CELLS:-"--seq_lens=131072 --kv_heads=8 --head_dim=128 --causal=0 --dtype=bf16"}
SECONDS=0
profile() {  # name, variables ("" or "A=1 B=2"), then ncu's filter and the command
  local name=$1 vars=$2
  shift 2
  echo "=== $name (${SECONDS}s)" >> "$OUT/ncu.txt"
  env $vars timeout "${NCU_TIMEOUT:-90}" "$NCU" --clock-control "${CLOCK:-base}" $SEC_ARGS --metrics "$METRICS" \
    "$@" >> "$OUT/ncu.txt" 2>&1
  echo "=== rc=$? $name (${SECONDS}s)" | tee -a "$OUT/ncu.txt"
}
IFS='@' read -ra CELL_LIST <<< "$CELLS"
for cell in "${CELL_LIST[@]}"; do
  IFS='|' read -r shape knobs <<< "$cell"
  [ -n "$shape" ] || continue
  BENCH="bin/cuda_bench $shape --iters=1 --warmup=0 --warmup_ms=0 --target_ms=0 --variants=5"
  BENCH="$BENCH --sparse_variants= --block_ms= --tag=ncu"
  profile "ours $shape" "" -k regex:DenseFa3Kernel --launch-count 1 $BENCH
  IFS=';' read -ra KNOB_LIST <<< "${knobs:-}"
  for k in "${KNOB_LIST[@]}"; do
    [ -n "$k" ] || continue
    profile "ours $shape [$k]" "${k//+/ }" -k regex:DenseFa3Kernel --launch-count 1 $BENCH
  done
done
# cuDNN: one sdpa_reference.py process per SDPA_SHAPES entry (comma lists allowed: every
# combination), each launch profiled (warm-up first, then the timed one, per combination:
# the table takes the second).
IFS='@' read -ra SDPA_LIST <<< "${SDPA_SHAPES-$(echo "$CELLS" | sed 's/|[^@]*//g')}"
for shape in "${SDPA_LIST[@]}"; do
  [ -n "$shape" ] || continue
  # cuDNN's kernel names vary by version: any kernel of these words (the SDPA call's only one).
  profile "cudnn $shape" "" -k 'regex:cudnn|fprop|fmha|sdpa|flash' --launch-count "${SDPA_LAUNCHES:-2}" \
    python3 sdpa_reference.py $shape --backends cudnn --iters 1 --warmup 1
done
echo "ncu done (${SECONDS}s)" | tee -a "$OUT/ncu.txt"
python3 dense_ncu_table.py "$OUT/ncu.txt" --launches 2 | tee "$OUT/ncu_table.txt"
