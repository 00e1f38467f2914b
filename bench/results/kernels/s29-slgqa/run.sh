#!/usr/bin/env bash
# s29-slgqa device run (on the GPU machine; s29-sl's run.sh): passes 1-3 launched as clusters of
# the 4 slots of one kv head with a cluster barrier every few key tiles (SPATTN_SL_KV_CLUSTER=0:
# the plain launch; SPATTN_SL_KV_CLUSTER_TILES=n: the barrier every n tiles). `new` = this branch,
# `base` = main ccabe17's spattn-bench.
#  1. sampled_lines_gpu_test (new).
#  2. Bench per length (LENS), the BENCH_RUNS_<len> entries back to back (binary[:VAR=VALUE]),
#     one process each: spattn-bench --device=cuda llm_mix 32/8 heads d128 bf16, sampled_lines
#     gamma 0.95 on every head, block_m 128, SPATTN_GPU_BUILDER_PROFILE=1.
#  3. build_index_gpu_test '*sampled_lines*:*SampledLines*' by default and (SPLIT_MODE=1) with
#     SPATTN_SL_SPLIT_TILES=1 (split groups: global cursors), MODES_EXTRA more ("ENV|filter").
#  3b. EXTRA_RUNS="len/binary[:VAR=VALUE] ...": more bench cells after the tests (under CAP).
#  4. NCU=1: ncu of one 128K build's pass 3 (new, and base with NCU_BASE=1): speed of light and
#     memory workload (DRAM bytes, L2 hit rate); NCU_DUR=1 also every kernel's duration.
# Steps are skipped once the script has run CAP seconds. Outputs: summary.txt + all.tar.gz in $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s29slgqa_out; rm -rf $R; mkdir -p $R
CAP=${CAP:-80}
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
left() { [ $SECONDS -lt $CAP ] || { note "skipped: $1 (cap $CAP s)"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
rm -rf /tmp/s29slgqa && mkdir -p /tmp/s29slgqa && tar -xJf all.tar.xz -C /tmp/s29slgqa
cd /tmp/s29slgqa
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
export LD_LIBRARY_PATH=$PWD/lib
timeout 30 bin/sampled_lines_gpu_test > $R/test_sampled_lines_gpu_test.log 2>&1
note "sampled_lines_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' $R/test_sampled_lines_gpu_test.log | tr '\n' ' ')"
bench() {  # tag, binary, len, methods, extra env...
  local tag=$1 b=$2 len=$3 methods=$4; shift 4
  env "$@" SPATTN_GPU_BUILDER_PROFILE=1 timeout $((len / 4096 + 15)) bin/$b \
    --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
    --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
    --block_m=128 --methods=$methods --sampled_lines.gamma=0.95 > $R/bench_$tag.jsonl 2> $R/bench_$tag.err
  note "bench $tag rc=$? | $(grep -h 'gpu builder' $R/bench_$tag.err | tail -1)"
}
cell() {  # len, binary[:VAR=VALUE]
  local len=$1 run=$2 n envs=() tag b
  n=${run%%:*}; [ "$run" != "$n" ] && envs=("${run#*:}")
  tag=${n}$( [ ${#envs[@]} -gt 0 ] && echo "_${envs[0]##*_}" | tr '=,' '--')_$len
  [ -e $R/bench_$tag.jsonl ] && tag=${tag}_2
  b=spattn-bench; [ $n = base ] && b=spattn-bench-base
  left "bench $tag" && bench $tag $b $len sampled_lines "${envs[@]}"
}
for len in ${LENS:-131072 32768}; do
  runs_var=BENCH_RUNS_$len
  for run in ${!runs_var:-${BENCH_RUNS:-base new}}; do cell $len $run; done
done
i=0
modes=("default|*sampled_lines*:*SampledLines*")
[ "${SPLIT_MODE:-1}" = 1 ] && modes+=("SPATTN_SL_SPLIT_TILES=1|*sampled_lines*:*SampledLines*")
[ -n "${MODES_EXTRA:-}" ] && modes+=("$MODES_EXTRA")
for mode in "${modes[@]}"; do
  i=$((i + 1)); m=${mode%%|*}; filt=${mode#*|}; envs=(); [ "$m" != default ] && IFS=';' read -ra envs <<< "$m"
  left "build_index_gpu_test $m" || continue
  env "${envs[@]}" timeout ${TEST_TIMEOUT:-40} bin/build_index_gpu_test --gtest_filter="$filt" > $R/test_gpu_$i.log 2>&1
  note "build_index_gpu_test ($m) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_gpu_$i.log | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 $R/test_gpu_$i.log | head -20
done
# 3b. EXTRA_RUNS ("len/binary[:VAR=VALUE] ..."): more bench cells after the tests (under CAP).
for x in ${EXTRA_RUNS:-}; do cell ${x%%/*} ${x#*/}; done
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  L=${NCU_LEN:-131072}
  nargs=(--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
         --group_by=all --recall_rows=1 --seq_len=$L --warmup=0 --repeat=1 --block_m=128
         --methods=sampled_lines --sampled_lines.gamma=0.95)
  if [ "${NCU_DUR:-0}" = 1 ] && left "ncu durations"; then
    timeout ${NCU_TIMEOUT:-40} ncu --clock-control none --metrics gpu__time_duration.sum \
      --launch-count ${NCU_LAUNCHES:-60} bin/spattn-bench "${nargs[@]}" > $R/ncu_durations_new.txt 2>&1
    note "ncu durations rc=$?"
  fi
  for n in ${NCU_PASS3-new} ${NCU_BASE:+base}; do
    b=spattn-bench; [ $n = base ] && b=spattn-bench-base
    left "ncu pass 3 $n" || continue
    # Passes 1, 2, 3 are the first three SlPassKernel launches of the build.
    timeout ${NCU_TIMEOUT:-40} ncu --clock-control none -k 'regex:SlPassKernel' --launch-skip 2 \
      --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
      bin/$b "${nargs[@]}" > $R/ncu_pass3_$n.txt 2>&1
    note "ncu pass 3 $n rc=$?"
  done
fi
python3 - $R <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        tag = os.path.basename(f)[6:-6]
        if "error" in r:
            print(tag, "ERROR", str(r["error"])[:200]); continue
        print("%-28s %-17s index %7.2f kernel %7.2f density %.4f recall %.4f min %.3f %s" %
              (tag, r.get("method", "?"), r["index_build_ms"], r["kernel_ms"], r["density"],
               r["recall"], r["recall_min"], r.get("device", "")))
# Every new cell's index fingerprint against base's first cell of its length (the same index:
# every field equal, pairs, ranges, columns, densities, per-head recalls).
keys = ["pairs", "index_ranges", "index_cols", "density", "density_min", "density_max", "recall",
        "recall_min", "recall_heads", "rel_l2_error"]
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    L = [p for p in tag.split("_") if p.isdigit() and int(p) >= 1024][0]
    fb = os.path.join(sys.argv[1], "bench_base_%s.jsonl" % L)
    if f == fb: continue
    try:
        b = json.loads(open(fb).readline()); n = json.loads(open(f).readline())
    except Exception:
        continue
    diff = [k for k in keys if b.get(k) != n.get(k)]
    print("fingerprint %s vs base_%s: %s" % (tag, L, "equal" if not diff else "DIFFERS " + ",".join(diff)))
PY
(cd $R && tar -czf "$OUT/all.tar.gz" .)
note "done"
