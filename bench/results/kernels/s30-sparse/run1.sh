#!/usr/bin/env bash
# s30-sparse call 1 (main e9c159b's cuda_bench only): ncu source counters (SASS lines: instructions
# executed, warp stall samples) of the sparse kernel at 32K bf16 32 q / 8 kv heads d 128 causal
# block_m 128 -- launch 1 the dense index, launch 2 ranges 0.03 (0.069) -- and of the dense
# kernel at 32K; clocks unlocked (as the benches run).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s30sp1 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
note "ncu=$NCU $($NCU --version | tail -1)"
B=bin/base/cuda_bench
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=1 --warmup=0 --col_densities= --sampled_lines=0 --workspace_mb=2048"
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section InstructionStats --section SchedulerStats"
timeout 75 $NCU --clock-control none -k regex:PersistentFa3Kernel --launch-count 2 $SEC -o "$WORK/sp" -f \
  $B $S --variants=5 --sparse_variants=5 --block_ms=128 --range_densities=0.03 --tag=ncu > "$O/ncu_sp_log.txt" 2>&1
note "ncu sparse rc=$?"
timeout 45 $NCU --clock-control none -k regex:DenseFa3Kernel --launch-count 1 $SEC -o "$WORK/de" -f \
  $B $S --variants=5 --sparse_variants= --block_ms= --range_densities= --tag=ncu > "$O/ncu_de_log.txt" 2>&1
note "ncu dense rc=$?"
for r in sp de; do
  timeout 10 $NCU --import "$WORK/$r.ncu-rep" --print-details all > "$O/ncu_$r.txt" 2>&1
  timeout 15 $NCU --import "$WORK/$r.ncu-rep" --page source --csv --print-source sass > "$WORK/sass_$r.csv" 2>&1
  note "sass $r rc=$? $(wc -c < "$WORK/sass_$r.csv") bytes"
  xz -6 -T4 -c "$WORK/sass_$r.csv" > "$O/sass_$r.csv.xz"
done
tar -cf "${OUT:-/tmp/out}/run1.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
