#!/usr/bin/env bash
# s22-slbuild device run (on the GPU machine; from s21-slbuild's): the GPU sampled_lines builder of
# this branch (`new`: the row assembler's fill kernel re-reads its words' events from shared
# memory instead of holding them in registers, no spills) against its CPU twin and main's binary
# (`base`, main 7a066d9).
# Tests (new binary): the whole build_index_gpu_test once (every method's twin: the row assembler
# is shared), sampled_lines_gpu_test, the new row_assembly_gpu_test (the fill pass's fallback),
# then build_index_gpu_test's sampled_lines tests once per TEST_MODES entry (comma-separated
# environment assignments). SDPA=1: PyTorch SDPA cuDNN at 32K and 128K. NCU=1: Nsight Compute on
# the three passes and the assembler (count, fill) of the first 32K build of NCU_BINS: speed of
# light, occupancy and every warp stall reason per issued instruction. Then per length (LENS) and
# block_m (BMS) the BENCH_RUNS entries back to back (name of a packed binary, optionally
# :VAR=VALUE for its environment): spattn-bench --device=cuda with the builder's stage times
# (SPATTN_GPU_BUILDER_PROFILE=1, one line per build): llm_mix 32/8 heads d 128 bf16,
# sampled_lines at gamma 0.95 on every head.
set -u
cd "$(dirname "$0")"
HERE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for n in new base; do
  [ -f $n.tar.xz ] || continue
  rm -rf /tmp/s22sl_$n && mkdir -p /tmp/s22sl_$n && tar -xJf $n.tar.xz -C /tmp/s22sl_$n
done
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/s22sl_new
if [ "${FULL_TEST:-1}" = 1 ]; then
  LD_LIBRARY_PATH=$PWD/lib timeout 150 bin/build_index_gpu_test > "$OUT/test_gpu_all.log" 2>&1
  note "build_index_gpu_test (new, all) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu_all.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu_all.log" | head -30
fi
for t in sampled_lines_gpu_test row_assembly_gpu_test; do
  [ -x bin/$t ] || continue
  LD_LIBRARY_PATH=$PWD/lib timeout 60 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t (new) rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_$t.log" | head -20
done
i=0
for mode in ${TEST_MODES:-}; do
  i=$((i + 1)); envs=(); [ "$mode" != default ] && IFS=, read -r -a envs <<< "$mode"
  env "${envs[@]}" LD_LIBRARY_PATH=$PWD/lib timeout ${TEST_TIMEOUT:-90} bin/build_index_gpu_test \
    --gtest_filter="*sampled_lines*:*SampledLines*" > "$OUT/test_gpu_$i.log" 2>&1
  note "build_index_gpu_test (new, $mode) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu_$i.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu_$i.log" | head -20
done
if [ -n "${SDPA:-}" ]; then
  timeout 60 python3 "$HERE/sdpa_reference.py" --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
    > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
  cat "$OUT/sdpa.jsonl"
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  for n in ${NCU_BINS:-new}; do
    cd /tmp/s22sl_$n
    echo "=== ncu $n bm 128" >> "$OUT/ncu.txt"
    LD_LIBRARY_PATH=$PWD/lib timeout 150 ncu --clock-control none \
      -k 'regex:SlPassKernel|AssembleKernel' --launch-count 5 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$' \
      bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1 --seq_len=32768 \
      --block_m=128 --methods=sampled_lines --sampled_lines.gamma=0.95 >> "$OUT/ncu.txt" 2>&1
    note "ncu $n rc=$?"
  done
fi
for len in ${LENS:-32768 131072}; do
  for bm in ${BMS:-128}; do
    for run in ${BENCH_RUNS:-base new}; do
      n=${run%%:*}; envs=(); [ "$run" != "$n" ] && envs=("${run#*:}")
      tag=${n}$( [ ${#envs[@]} -gt 0 ] && echo "_${envs[0]##*_}" | tr '=' '-')_bm${bm}_$len
      cd /tmp/s22sl_$n
      env "${envs[@]}" SPATTN_GPU_BUILDER_PROFILE=1 LD_LIBRARY_PATH=$PWD/lib \
        timeout $((len / 4096 + 13)) bin/spattn-bench \
        --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
        --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
        --block_m=$bm --methods=sampled_lines --sampled_lines.gamma=0.95 \
        > "$OUT/bench_$tag.jsonl" 2> "$OUT/bench_$tag.err"
      note "bench $tag rc=$? | $(grep -h 'gpu builder' "$OUT/bench_$tag.err" | tail -1)"
    done
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
        print("%-34s index %7.2f kernel %7.2f density %.4f recall %.4f min %.3f %s" %
              (tag, r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"],
               r["recall_min"], r["device"]))
PY
(cd "$OUT" && tar -czf /tmp/s22sl_all.tgz . && find . -mindepth 1 -delete && mv /tmp/s22sl_all.tgz ./all.tgz)
