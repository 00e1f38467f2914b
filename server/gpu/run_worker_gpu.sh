#!/usr/bin/env bash
# One GPU-machine run of the worker's CUDA backend: its tests, then spattn-server-bench.
# Expects what pack_worker_gpu.sh made next to it. Logs under $OUT (or /tmp/out); a summary last.
# Usage: run_worker_gpu.sh [spattn-server-bench flags...]
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_worker_gpu && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nproc; free -g | head -2
  # POSIX shared memory is a tmpfs; containers often keep it small. Grow it when allowed.
  df -h /dev/shm
  mount -o remount,size=48G /dev/shm 2>&1 && df -h /dev/shm
} > "$OUT/machine.txt" 2>&1
export SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test && mkdir -p "$TEST_TMPDIR"
{ timeout 120 bin/cuda_backend_test; echo "cuda_backend_test rc=$?"; } > "$OUT/tests.log" 2>&1
{ timeout 45 bin/cuda_ipc_test; echo "cuda_ipc_test rc=$?"; } >> "$OUT/tests.log" 2>&1
timeout 240 bin/spattn-server-bench "$@" > "$OUT/server_bench.jsonl" 2> "$OUT/server_bench.err"
echo "spattn-server-bench rc=$?" >> "$OUT/tests.log"
echo "=== machine"; cat "$OUT/machine.txt"
echo "=== tests"; grep -hE "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|rc=" "$OUT/tests.log"
grep -hE "Failure|error|Expected|Which is|Value of|bound" "$OUT/tests.log" | cut -c1-400 | head -30
echo "=== bench"; cat "$OUT/server_bench.jsonl"
echo "=== bench stderr"; grep -v "level=info" "$OUT/server_bench.err" | tail -15
