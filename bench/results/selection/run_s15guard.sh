#!/usr/bin/env bash
# s15-guard device run (on the GPU machine): the CUDA worker tests (CudaBackendGuardTest: the
# guard on the GPU), PyTorch SDPA cuDNN, then spattn-bench --device=cuda --methods=guarded at
# 32K and 128K, llm_mix 32/8 heads d 128 bf16 (search on a 16K prompt at target 0.95), with this
# tree's guard (short heads widened together) and the baseline's (head by head), same flags.
# guard_recall_ms = the recall stage of a first request.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s15guard && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 40 bin/cuda_backend_test --gtest_filter=${TEST_FILTER:-CudaBackendGuardTest.*} > "$OUT/test_cuda_backend.log" 2>&1
note "cuda_backend_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_cuda_backend.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A4 "$OUT"/test_*.log | head -30
timeout 40 python3 sdpa_reference.py --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
cat "$OUT/sdpa.jsonl" 2>/dev/null
bench() {  # binary, len, tag, timeout
  timeout $4 bin/$1 --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$2 \
    --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3 \
    --methods=guarded > "$OUT/bench_$3_$2.jsonl" 2> "$OUT/bench_$3_$2.err"
  note "bench $3 $2 rc=$?"
}
bench spattn-bench 32768 batched 30
bench spattn-bench 131072 batched 45
bench spattn-bench-base 131072 perhead 45
# The baseline at 32K only while the device time allows (BASE32_BEFORE seconds into the run).
if [ $SECONDS -lt ${BASE32_BEFORE:-85} ]; then bench spattn-bench-base 32768 perhead 25; fi
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        tag = os.path.basename(f)[6:-6]
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        print("%-18s index %7.2f kernel %7.2f guard_recall_ms %s warm %s density %.3f recall %.3f min %.3f %s" %
              (tag, r["index_build_ms"], r["kernel_ms"], r.get("guard_recall_ms", "-"),
               r.get("guard_recall_warm_ms", "-"), r["density"], r["recall"], r["recall_min"], r["device"]))
PY
