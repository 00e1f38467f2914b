#!/usr/bin/env bash
# s16-columns device run: run_matrix.sh (tests, SDPA, cuda_bench sets) then ncu on one column launch.
set -u
cd "$(dirname "$0")"
HERE=$PWD
set -a; . "$HERE/run.env"; set +a
bash "$HERE/run_matrix.sh"
OUT=${OUT:-/tmp/out}
cd /tmp/spattn_matrix && export LD_LIBRARY_PATH=$PWD/lib
if command -v ncu >/dev/null && [ -n "${NCU_ENVS:-}" ]; then
  IFS=';' read -ra NE <<< "$NCU_ENVS"
  for e in "${NE[@]}"; do
    echo "=== ncu [$e]" >> "$OUT/ncu.txt"
    env $e timeout 120 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      --section WarpStateStats --section SchedulerStats \
      bin/cuda_bench ${NCU_BENCH:---seq_lens=32768 --variants= --sparse_variants=5 --block_ms=128 --range_densities= --col_densities=0.2 --iters=1 --warmup=0} \
      >> "$OUT/ncu.txt" 2>&1
    echo "ncu rc=$? (${SECONDS}s)" >> "$OUT/ncu.txt"
  done
else
  echo "no ncu: $(command -v ncu)" >> "$OUT/ncu.txt"
fi
grep -E "^=== ncu|Duration|Throughput|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issued Warp|No Eligible|Active Warps|ncu rc" "$OUT/ncu.txt" | head -80
