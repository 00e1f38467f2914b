#!/usr/bin/env bash
# On the GPU machine: the four GPU tests of s15-structure's branch; logs to $OUT.
set -u
cd "$(dirname "$0")"
WORK=/tmp/spattn_s15s && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for t in build_index_gpu_test cuda_engine_test attention_cuda_test cuda_backend_test; do
  timeout 100 bin/$t > "$OUT/test_$t.log" 2>&1
  echo "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ') (${SECONDS}s)" | tee -a "$OUT/summary.txt"
done
echo "=== failures"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
