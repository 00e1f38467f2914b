#!/usr/bin/env bash
# s31-slhist device run (on the GPU machine; s30-slkv's run.sh). `new` = this branch (knobs by env:
# SPATTN_SL_HIST_PREFETCH=D pass 2's L2 prefetch distance, SPATTN_SL_HIST_PRED=0/1 its predicated
# histogram updates), `base` = main e30e6a9's spattn-bench. STEPS, in order (each skipped once the
# script has run CAP seconds):
#   test          sampled_lines_gpu_test, then build_index_gpu_test '*sampled_lines*:*SampledLines*'
#   LEN:RUN       one bench process: spattn-bench --device=cuda llm_mix 32/8 heads d128 bf16,
#                 sampled_lines gamma 0.95 on every head, block_m 128, SPATTN_GPU_BUILDER_PROFILE=1;
#                 RUN = binary[:VAR=VALUE[+VAR=VALUE]]
#   ncu:BIN       ncu of pass 2 (the build's second SlPassKernel launch) at 128K, one build,
#                 source counters + warp states + memory, clocks unlocked; the SASS source page
#                 exported as CSV (xz).
# Outputs: summary.txt + all.tar.gz in $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s31slhist_out; rm -rf $R; mkdir -p $R
CAP=${CAP:-100}
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
left() { [ $SECONDS -lt $CAP ] || { note "skipped: $1 (cap $CAP s)"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
rm -rf /tmp/s31slhist && mkdir -p /tmp/s31slhist && tar -xJf all.tar.xz -C /tmp/s31slhist
cp stages.py /tmp/s31slhist/
cd /tmp/s31slhist
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
export LD_LIBRARY_PATH=$PWD/lib
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
bench() {  # tag, binary, len, extra env...
  local tag=$1 b=$2 len=$3; shift 3
  env "$@" SPATTN_GPU_BUILDER_PROFILE=1 timeout $((len / 4096 + 15)) bin/$b \
    --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
    --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
    --block_m=128 --methods=sampled_lines --sampled_lines.gamma=0.95 > $R/bench_$tag.jsonl 2> $R/bench_$tag.err
  note "bench $tag rc=$? | $(grep -h 'gpu builder' $R/bench_$tag.err | tail -1 | sed 's/.*row_stats/row_stats/; s/ entry_total.*//')"
}
cell() {  # len, binary[:VAR=VALUE[+VAR=VALUE]]
  local len=$1 run=$2 n envs=() tag b e
  n=${run%%:*}
  if [ "$run" != "$n" ]; then IFS='+' read -ra envs <<< "${run#*:}"; fi
  tag=$n
  for e in "${envs[@]}"; do tag=${tag}_$(echo "${e#SPATTN_SL_}" | tr '=,' '--'); done
  tag=${tag}_$len
  [ -e $R/bench_$tag.jsonl ] && tag=${tag}_2
  b=spattn-bench; [ $n = base ] && b=spattn-bench-base
  left "bench $tag" && bench $tag $b $len "${envs[@]}"
}
tests() {
  left "tests" || return
  timeout 30 bin/sampled_lines_gpu_test > $R/test_sampled_lines_gpu_test.log 2>&1
  note "sampled_lines_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' $R/test_sampled_lines_gpu_test.log | tr '\n' ' ')"
  timeout ${TEST_TIMEOUT:-40} bin/build_index_gpu_test --gtest_filter="${TEST_FILTER:-*sampled_lines*:*SampledLines*}" > $R/test_gpu_1.log 2>&1
  note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_gpu_1.log | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|^\[       OK" -A3 $R/test_gpu_1.log | head -40 | tee -a "$OUT/summary.txt"
}
ncu_pass2() {  # base | new
  local n=$1 b=spattn-bench; [ $n = base ] && b=spattn-bench-base
  left "ncu $n" || return
  [ -n "$NCU" ] || { note "no ncu"; return; }
  timeout ${NCU_TIMEOUT:-40} $NCU --clock-control none -k regex:SlPassKernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
    --section SourceCounters --section InstructionStats --section SchedulerStats \
    -o $R/ncu_$n -f bin/$b --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
    --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=131072 --warmup=0 --repeat=1 --block_m=128 \
    --methods=sampled_lines --sampled_lines.gamma=0.95 > $R/ncu_${n}_log.txt 2>&1
  note "ncu $n rc=$?"
  timeout 15 $NCU --import $R/ncu_$n.ncu-rep --print-details all > $R/ncu_$n.txt 2>&1
  timeout 20 $NCU --import $R/ncu_$n.ncu-rep --page source --csv --print-source sass > $R/sass_$n.csv 2>&1
  note "sass $n rc=$? $(wc -c < $R/sass_$n.csv) bytes"
  xz -6 -T4 $R/sass_$n.csv; rm -f $R/ncu_$n.ncu-rep
  grep -E "Duration|Warp Cycles Per Issued|Issued Ipc|Achieved Occupancy|DRAM Throughput|L2 Hit Rate|Memory Throughput|Executed Instructions  " $R/ncu_$n.txt | head -12 | tee -a "$OUT/summary.txt"
}
for s in ${STEPS:-test}; do
  case $s in
    test) tests ;;
    ncu:*) ncu_pass2 ${s#ncu:} ;;
    *) cell ${s%%:*} ${s#*:} ;;
  esac
done
python3 - $R <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        tag = os.path.basename(f)[6:-6]
        if "error" in r:
            print(tag, "ERROR", str(r["error"])[:200]); continue
        print("%-40s %-14s index %7.2f kernel %7.2f density %.4f recall %.4f min %.3f %s" %
              (tag, r.get("method", "?"), r["index_build_ms"], r["kernel_ms"], r["density"],
               r["recall"], r["recall_min"], r.get("device", "")))
# Every new cell's index fingerprint against base's first cell of its length.
keys = ["pairs", "index_ranges", "index_cols", "density", "density_min", "density_max", "recall",
        "recall_min", "recall_heads", "rel_l2_error"]
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    L = [p for p in tag.split("_") if p.isdigit() and int(p) >= 1024][-1]
    fb = os.path.join(sys.argv[1], "bench_base_%s.jsonl" % L)
    if f == fb: continue
    try:
        b = json.loads(open(fb).readline()); n = json.loads(open(f).readline())
    except Exception:
        continue
    diff = [k for k in keys if b.get(k) != n.get(k)]
    print("fingerprint %s vs base_%s: %s" % (tag, L, "equal" if not diff else "DIFFERS " + ",".join(diff)))
PY
python3 stages.py $R > $R/stages.txt 2>&1; cat $R/stages.txt | tee -a "$OUT/summary.txt"
(cd $R && tar -czf "$OUT/all.tar.gz" .)
note "done"
