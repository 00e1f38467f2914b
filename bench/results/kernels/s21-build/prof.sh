#!/usr/bin/env bash
# s21-build profile run (main's binary only): ncu of the merge (vertical_slash 32K, flex_prefill
# 128K), block_sparse's rows kernel (128K) and anchor's two passes (128K), plus the stage profile.
set -u
cd "$(dirname "$0")"
W=/tmp/s21b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
B=bin/spattn-bench-base
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio"
prof() {  # name regex count args...
  local n=$1 k=$2 c=$3; shift 3
  echo "=== $n" >> "$OUT/ncu.txt"
  timeout 100 ncu --clock-control none -k regex:"$k" --launch-count $c $S $B $C "$@" >> "$OUT/ncu.txt" 2>&1
  note "ncu $n rc=$?"
}
prof vs32_merge MergeRowsKernel 2 --seq_len=32768 --methods=vertical_slash
prof fp128_merge MergeRowsKernel 2 --seq_len=131072 --methods=flex_prefill
prof bs128_rows BlockSparseRowsKernel 1 --seq_len=131072 --methods=block_sparse
prof an128 "AnStripeKernel|AnAnchorKernel" 2 --seq_len=131072 --methods=anchor
grep -E "^=== |Kernel|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|Compute \(SM\) Th|Memory Th|L1/TEX Hit|L2 Hit|stalled|Dynamic Shared" "$OUT/ncu.txt" | cut -c1-150 | head -150
cat "$OUT/summary.txt"
