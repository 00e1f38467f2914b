#!/usr/bin/env bash
# s16-hist device run (on the GPU machine): the GPU sampled_lines builder of this branch (`new`)
# against its CPU twin (build_index_gpu_test), PyTorch SDPA cuDNN, then for `new` and `base` (the
# tree it started from) spattn-bench --device=cuda at 32K and 128K with the builder's stage times
# (SPATTN_GPU_BUILDER_PROFILE=1, one line per build): llm_mix 32/8 heads d 128 bf16,
# sampled_lines at gamma 0.95 on every head; `new` under each histogram mode (SPATTN_SL_HIST_MODE).
# SDPA=1 adds PyTorch SDPA cuDNN at 32K and 128K (run 1 had it; run 2 left it out for budget).
set -u
cd "$(dirname "$0")"
HERE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for n in new base; do
  rm -rf /tmp/s16hist_$n && mkdir -p /tmp/s16hist_$n && tar -xJf $n.tar.xz -C /tmp/s16hist_$n
done
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/s16hist_new
# Pass 2's histogram update variants (SPATTN_SL_HIST_MODE, sampled_lines_kernels.h): each against
# the CPU twin.
for mode in ${HIST_MODES:-0 1 2}; do
  SPATTN_SL_HIST_MODE=$mode LD_LIBRARY_PATH=$PWD/lib timeout ${TEST_TIMEOUT:-40} bin/build_index_gpu_test \
    --gtest_filter="*MatchesCpuTwin/sampled_lines:*KernelRunsOnTheResidentIndex/sampled_lines" > "$OUT/test_gpu_mode$mode.log" 2>&1
  note "build_index_gpu_test (new, hist mode $mode) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu_mode$mode.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu_mode$mode.log" | head -20
done
[ -n "${SDPA:-}" ] && timeout 40 python3 "$HERE/sdpa_reference.py" --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
cat "$OUT/sdpa.jsonl" 2>/dev/null
for len in 32768 131072; do
  for run in ${BENCH_RUNS:-base:0 new:0 new:1 new:2}; do
    n=${run%%:*} mode=${run##*:}
    cd /tmp/s16hist_$n
    SPATTN_SL_HIST_MODE=$mode SPATTN_GPU_BUILDER_PROFILE=1 LD_LIBRARY_PATH=$PWD/lib \
      timeout $((len / 4096 + 13)) bin/spattn-bench \
      --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
      --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
      --methods=sampled_lines --sampled_lines.gamma=0.95 \
      > "$OUT/bench_${n}${mode}_$len.jsonl" 2> "$OUT/bench_${n}${mode}_$len.err"
    note "bench $n mode $mode $len rc=$? | $(grep -h 'gpu builder' "$OUT/bench_${n}${mode}_$len.err" | tail -1)"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        tag = os.path.basename(f)[6:-6]
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        print("%-12s %-14s index %7.2f kernel %7.2f density %.4f recall %.4f min %.3f %s" %
              (tag, r["method"], r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"],
               r["recall_min"], r["device"]))
PY
# Everything in one file (the run tool brings back a limited number of files).
(cd "$OUT" && tar -czf /tmp/s16hist_all.tgz . && find . -mindepth 1 -delete && mv /tmp/s16hist_all.tgz ./all.tgz)
