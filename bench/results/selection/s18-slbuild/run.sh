#!/usr/bin/env bash
# s18-slbuild device run (on the GPU machine; from s17-slbuild's): the GPU sampled_lines builder
# of this branch (`new`) against its CPU twin (build_index_gpu_test, each pass-2 buffer mode),
# PyTorch SDPA cuDNN (SDPA=1), then for `base` (main 1f166f0) and `new` back to back
# spattn-bench --device=cuda at 32K and 128K with the builder's stage times
# (SPATTN_GPU_BUILDER_PROFILE=1, one line per build): llm_mix 32/8 heads d 128 bf16, sampled_lines
# at gamma 0.95 on every head. NCU=1 adds ncu of new's three pass kernels at 32K. BENCH_RUNS lists
# name:mode pairs, HIST_MODES the modes tested; a mode sets SPATTN_SL_HIST_BUFFERS (2 = pass 2 on
# two key buffers, else one, the default) and SPATTN_SL_EMIT_BAND (0 = pass 3's exact test on every
# entry, else the logit band; run 3 only: the band was dropped after it, later binaries ignore it).
set -u
cd "$(dirname "$0")"
HERE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for n in new base; do
  rm -rf /tmp/s18sl_$n && mkdir -p /tmp/s18sl_$n && tar -xJf $n.tar.xz -C /tmp/s18sl_$n
done
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/s18sl_new
for mode in ${HIST_MODES:-1 2}; do
  SPATTN_SL_HIST_BUFFERS=$mode SPATTN_SL_EMIT_BAND=$mode LD_LIBRARY_PATH=$PWD/lib timeout ${TEST_TIMEOUT:-60} bin/build_index_gpu_test \
    --gtest_filter="*sampled_lines*" > "$OUT/test_gpu_mode$mode.log" 2>&1
  note "build_index_gpu_test (new, mode $mode) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu_mode$mode.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu_mode$mode.log" | head -20
done
if [ -n "${SDPA:-}" ]; then
  timeout 60 python3 "$HERE/sdpa_reference.py" --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
    > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
  cat "$OUT/sdpa.jsonl"
fi
for len in ${LENS:-32768 131072}; do
  for run in ${BENCH_RUNS:-base:1 new:1}; do
    n=${run%%:*} mode=${run##*:}
    cd /tmp/s18sl_$n
    SPATTN_SL_HIST_BUFFERS=$mode SPATTN_SL_EMIT_BAND=$mode SPATTN_GPU_BUILDER_PROFILE=1 LD_LIBRARY_PATH=$PWD/lib \
      timeout $((len / 4096 + 13)) bin/spattn-bench \
      --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
      --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
      --methods=sampled_lines --sampled_lines.gamma=0.95 \
      > "$OUT/bench_${n}${mode}_$len.jsonl" 2> "$OUT/bench_${n}${mode}_$len.err"
    note "bench $n mode $mode $len rc=$? | $(grep -h 'gpu builder' "$OUT/bench_${n}${mode}_$len.err" | tail -1)"
  done
done
if [ -n "${NCU:-}" ] && command -v ncu > /dev/null; then
  cd /tmp/s18sl_new
  LD_LIBRARY_PATH=$PWD/lib timeout 150 ncu --clock-control none -k regex:SlPassKernel --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats bin/spattn-bench \
    --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
    --group_by=all --recall_rows=64 --seq_len=32768 --warmup=0 --repeat=1 \
    --methods=sampled_lines --sampled_lines.gamma=0.95 > "$OUT/ncu.txt" 2>&1
  note "ncu rc=$?"
fi
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
(cd "$OUT" && tar -czf /tmp/s18sl_all.tgz . && find . -mindepth 1 -delete && mv /tmp/s18sl_all.tgz ./all.tgz)
