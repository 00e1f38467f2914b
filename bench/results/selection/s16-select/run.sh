#!/usr/bin/env bash
# s16-select device run (on the GPU machine): the GPU sampled_lines builder against its CPU twin
# (build_index_gpu_test), PyTorch SDPA cuDNN, then spattn-bench --device=cuda at 32K and 128K,
# llm_mix 32/8 heads d 128 bf16, served prompt = seed 0, configs searched on another 16K prompt
# (seed 1000) at target 0.95: sampled_lines at gamma 0.95 for every head (no search), `searched` (the default
# candidates, now with sampled_lines) and `guarded` (searched + the worker's recall guard).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s16select && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${TEST_TIMEOUT:-40} bin/build_index_gpu_test \
  --gtest_filter="${TEST_FILTER:-*MatchesCpuTwin/sampled_lines:*KernelRunsOnTheResidentIndex/sampled_lines}" > "$OUT/test_gpu.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu.log" | head -40
if [ -z "${SKIP_SDPA:-}" ]; then
  timeout 40 python3 sdpa_reference.py --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
    > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
  cat "$OUT/sdpa.jsonl" 2>/dev/null
fi
bench() {  # len, tag, timeout, methods, extra flags...
  local len=$1 tag=$2 to=$3 methods=$4; shift 4
  timeout $to bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=$len \
    --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3 \
    --methods=$methods "$@" > "$OUT/bench_${tag}_$len.jsonl" 2> "$OUT/bench_${tag}_$len.err"
  note "bench $tag $len rc=$?"
}
bench 32768 fixed95 20 sampled_lines --sampled_lines.gamma=0.95
bench 32768 sel 45 searched,guarded
bench 131072 fixed95 35 sampled_lines --sampled_lines.gamma=0.95
bench 131072 sel 75 searched,guarded
# Stage times of the GPU builder (StageTimer, one build per line), while the device time allows.
if [ $SECONDS -lt ${PROFILE_BEFORE:-150} ]; then
  for len in 32768 131072; do
    SPATTN_GPU_BUILDER_PROFILE=1 timeout 40 bin/spattn-bench --device=cuda --workload=llm_mix \
      --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 \
      --seq_len=$len --warmup=1 --repeat=1 --methods=sampled_lines 2>&1 | grep "gpu builder" \
      > "$OUT/profile_$len.txt"
    note "profile $len: $(tail -1 "$OUT/profile_$len.txt")"
  done
fi
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        tag = os.path.basename(f)[6:-6]
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        print("%-14s %-14s index %7.2f kernel %7.2f guard_recall_ms %s warm %s density %.4f recall %.4f min %.3f %s %s" %
              (tag, r["method"], r["index_build_ms"], r["kernel_ms"], r.get("guard_recall_ms", "-"),
               r.get("guard_recall_warm_ms", "-"), r["density"], r["recall"], r["recall_min"],
               r.get("choices", ""), r["device"]))
PY
