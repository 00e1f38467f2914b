#!/usr/bin/env bash
# s23-slbuild device run (on the GPU machine; from s22-slbuild's): the GPU sampled_lines builder of
# this branch (`new`: pass 3 computes only the key tiles its CTA's rows may keep an entry of,
# from pass 2's per-(row, tile) bin bounds) against main's binary (`base`, c3ec5f8).
# Tests (new binary): sampled_lines_gpu_test, row_assembly_gpu_test, then build_index_gpu_test's
# sampled_lines tests (the CPU twins and the tile list's bit-for-bit check) once per TEST_MODES
# entry (comma-separated environment assignments). Then per length (LENS) the BENCH_RUNS entries
# back to back (name of a packed binary, optionally :VAR=VALUE for its environment):
# spattn-bench --device=cuda with the builder's stage times (SPATTN_GPU_BUILDER_PROFILE=1):
# llm_mix 32/8 heads d 128 bf16, sampled_lines at gamma 0.95 on every head, block_m 128.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for n in new base; do
  [ -f $n.tar.xz ] || continue
  rm -rf /tmp/s23sl_$n && mkdir -p /tmp/s23sl_$n && tar -xJf $n.tar.xz -C /tmp/s23sl_$n
done
if [ -f all.tar.xz ]; then  # pack.sh all: both in one archive, base's bench as spattn-bench-base
  rm -rf /tmp/s23sl_new /tmp/s23sl_base && mkdir -p /tmp/s23sl_new /tmp/s23sl_base/bin
  tar -xJf all.tar.xz -C /tmp/s23sl_new
  mv /tmp/s23sl_new/bin/spattn-bench-base /tmp/s23sl_base/bin/spattn-bench
  ln -s /tmp/s23sl_new/lib /tmp/s23sl_base/lib
fi
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/s23sl_new
for t in sampled_lines_gpu_test row_assembly_gpu_test; do
  LD_LIBRARY_PATH=$PWD/lib timeout 60 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t (new) rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_$t.log" | head -20
done
i=0
for mode in ${TEST_MODES:-default}; do
  i=$((i + 1)); envs=(); [ "$mode" != default ] && IFS=, read -r -a envs <<< "$mode"
  env "${envs[@]}" LD_LIBRARY_PATH=$PWD/lib timeout ${TEST_TIMEOUT:-90} bin/build_index_gpu_test \
    --gtest_filter="*sampled_lines*:*SampledLines*" > "$OUT/test_gpu_$i.log" 2>&1
  note "build_index_gpu_test (new, $mode) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu_$i.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu_$i.log" | head -20
  grep -h "^tile list" "$OUT/test_gpu_$i.log"
done
for len in ${LENS:-32768 131072}; do
  for run in ${BENCH_RUNS:-base new}; do
    n=${run%%:*}; envs=(); [ "$run" != "$n" ] && envs=("${run#*:}")
    tag=${n}$( [ ${#envs[@]} -gt 0 ] && echo "_${envs[0]##*_}" | tr '=' '-')_$len
    cd /tmp/s23sl_$n
    env "${envs[@]}" SPATTN_GPU_BUILDER_PROFILE=1 LD_LIBRARY_PATH=$PWD/lib \
      timeout $((len / 4096 + 13)) bin/spattn-bench \
      --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
      --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
      --block_m=128 --methods=sampled_lines --sampled_lines.gamma=0.95 \
      > "$OUT/bench_$tag.jsonl" 2> "$OUT/bench_$tag.err"
    note "bench $tag rc=$? | $(grep -h 'gpu builder' "$OUT/bench_$tag.err" | tail -1)"
    grep -h "tile census" "$OUT/bench_$tag.err" | tail -1
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
