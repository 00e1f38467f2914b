#!/usr/bin/env bash
# s15-selection device run (on the GPU machine): the GPU recall estimate's tests, the CUDA worker
# tests with the guard on by default, PyTorch SDPA cuDNN, then spattn-bench --device=cuda
# searched + guarded (the worker's guard on the GPU, its recall stage timed) at LENS (default
# 32768 131072), llm_mix 32/8 heads d 128 bf16, search on a 16K prompt at target 0.95.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s15sel && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 90 bin/mass_recall_test > "$OUT/test_mass_recall.log" 2>&1
  note "mass_recall_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_mass_recall.log" | tr '\n' ' ')"
  timeout 120 bin/cuda_backend_test > "$OUT/test_cuda_backend.log" 2>&1
  note "cuda_backend_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_cuda_backend.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A4 "$OUT"/test_*.log | head -30
fi
[ -z "${SKIP_SDPA:-}" ] && timeout 60 python3 sdpa_reference.py --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
cat "$OUT/sdpa.jsonl" 2>/dev/null
for len in ${LENS-32768 131072}; do
  t=120; [ "$len" = 131072 ] && t=200
  timeout $t bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$len \
    --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3 \
    --methods=${METHODS:-guarded} ${EXTRA:-} >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
  note "bench $len rc=$?"
done
if [ -n "${PROMISE:-}" ]; then
  # The promise check: configs searched on a 16K prompt (target(s) PROMISE_TARGETS), served
  # through the worker's guard on the GPU on held-out prompts of 4K .. 128K.
  timeout ${PROMISE_TIMEOUT:-240} bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --seq_len=16384 --search_len=16384 \
    --methods=promise --promise_targets=${PROMISE_TARGETS:-0.95} \
    >> "$OUT/promise.jsonl" 2>> "$OUT/promise.err"
  note "promise rc=$?"
  cat "$OUT/promise.err" | cut -c1-300
  cat "$OUT/promise.jsonl"
fi
grep -v "searched head" "$OUT/bench.err" | cut -c1-900
[ -f "$OUT/bench.jsonl" ] && python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["method"], r.get("seq_len"), "ERROR", r["error"][:200]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("%-10s %7d index %7.2f kernel %7.2f guard %s warm %s total %7.2f ms density %.3f recall %.3f min %.3f" %
          (r["method"], r["seq_len"], b, k, r.get("guard_recall_ms", "-"),
           r.get("guard_recall_warm_ms", "-"), b + k, r["density"], r["recall"], r["recall_min"]))
PY
