#!/usr/bin/env bash
# s26-slbuild device run (on the GPU machine; s25-slbuild's run.sh): sampled_lines' GPU passes
# 1-3 by wgmma (issue 11 item 5). `new` = this branch, `base` = main 0d1e412's spattn-bench.
#  1. Tests (new): sampled_lines_gpu_test (exp2 + wgmma products = mma.sync products),
#     row_assembly_gpu_test; build_index_gpu_test's
#     sampled_lines tests by default and with SPATTN_SL_SPLIT_TILES=1 (split groups: global
#     histograms and cursors), MMA_MODE=1 also with SPATTN_SL_WGMMA=0, EXACT_MODE=1 also with SPATTN_SL_HIST_EXACT=1,SPATTN_SL_EMIT_EXACT=1
#     (TEST_FILTER=F: one default-mode run with filter F instead).
#  2. Bench per length (LENS), the BENCH_RUNS (or BENCH_RUNS_<len>) entries back to back
#     (binary[:VAR=VALUE]), one process each: spattn-bench --device=cuda llm_mix 32/8 heads d128
#     bf16, sampled_lines gamma 0.95 on every head, block_m 128, SPATTN_GPU_BUILDER_PROFILE=1.
#  3. NCU=1: ncu of the three pass kernels (first build) at NCU_LEN, per NCU_BINS.
#  4. SASS=1: per-opcode counts of the bf16 d128 pass kernels (cuobjdump, if the machine has it).
# Steps are skipped once the script has run CAP seconds. Outputs: summary.txt + all.tar.gz in $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s26sl_out; rm -rf $R; mkdir -p $R
CAP=${CAP:-100}
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
left() { [ $SECONDS -lt $CAP ] || { note "skipped: $1 (cap $CAP s)"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
rm -rf /tmp/s26sl && mkdir -p /tmp/s26sl && tar -xJf all.tar.xz -C /tmp/s26sl
cd /tmp/s26sl
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
export LD_LIBRARY_PATH=$PWD/lib
if [ "${TESTS:-1}" = 1 ]; then
  for t in sampled_lines_gpu_test row_assembly_gpu_test; do
    timeout 30 bin/$t > $R/test_$t.log 2>&1
    note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' $R/test_$t.log | tr '\n' ' ')"
    grep -hE "^\[  FAILED|Failure|^\[       OK|SKIPPED" -A3 $R/test_$t.log | head -24
  done
  i=0
  modes=("default|*sampled_lines*:*SampledLines*"
         "SPATTN_SL_SPLIT_TILES=1|*sampled_lines*:*SampledLines*")
  [ "${MMA_MODE:-0}" = 1 ] && modes+=("SPATTN_SL_WGMMA=0|*sampled_lines*:*SampledLines*")
  [ "${EXACT_MODE:-0}" = 1 ] && modes+=("SPATTN_SL_HIST_EXACT=1,SPATTN_SL_EMIT_EXACT=1|*sampled_lines*:*SampledLines*")
  [ -n "${TEST_FILTER:-}" ] && modes=("default|$TEST_FILTER")
  for mode in "${modes[@]}"; do
    i=$((i + 1)); m=${mode%%|*}; filt=${mode#*|}; envs=(); [ "$m" != default ] && IFS=, read -ra envs <<< "$m"
    left "build_index_gpu_test $m" || continue
    env "${envs[@]}" timeout ${TEST_TIMEOUT:-60} bin/build_index_gpu_test --gtest_filter="$filt" > $R/test_gpu_$i.log 2>&1
    note "build_index_gpu_test ($m) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_gpu_$i.log | tr '\n' ' ')"
    grep -hE "^\[  FAILED|Failure" -A6 $R/test_gpu_$i.log | head -20
  done
fi
bench() {  # tag, binary, len, methods, extra env...
  local tag=$1 b=$2 len=$3 methods=$4; shift 4
  env "$@" SPATTN_GPU_BUILDER_PROFILE=1 timeout $((len / 4096 + 15)) bin/$b \
    --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
    --group_by=all --recall_rows=64 --seq_len=$len --warmup=1 --repeat=$((len > 32768 ? 2 : 3)) \
    --block_m=128 --methods=$methods --sampled_lines.gamma=0.95 > $R/bench_$tag.jsonl 2> $R/bench_$tag.err
  note "bench $tag rc=$? | $(grep -h 'gpu builder' $R/bench_$tag.err | tail -1)"
}
for len in ${LENS:-32768 131072}; do
  runs_var=BENCH_RUNS_$len
  for run in ${!runs_var:-${BENCH_RUNS:-base new}}; do
    n=${run%%:*}; envs=(); [ "$run" != "$n" ] && envs=("${run#*:}")
    tag=${n}$( [ ${#envs[@]} -gt 0 ] && echo "_${envs[0]##*_}" | tr '=' '-')_$len
    b=spattn-bench; [ $n = base ] && b=spattn-bench-base
    left "bench $tag" && bench $tag $b $len sampled_lines "${envs[@]}"
  done
done
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  for n in ${NCU_BINS:-new base}; do
    left "ncu $n" || continue
    b=spattn-bench; [ $n = base ] && b=spattn-bench-base
    timeout ${NCU_TIMEOUT:-40} ncu --clock-control none -k 'regex:SlPassKernel' --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum' \
      bin/$b --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1 --seq_len=${NCU_LEN:-32768} \
      --block_m=128 --methods=sampled_lines --sampled_lines.gamma=0.95 > $R/ncu_$n.txt 2>&1
    note "ncu $n rc=$?"
  done
fi
if [ "${SASS:-1}" = 1 ] && command -v cuobjdump >/dev/null; then
  for n in new base; do
    b=spattn-bench; [ $n = base ] && b=spattn-bench-base
    timeout 40 cuobjdump -sass -fun 'regex:SlPassKernel.*bfloat16Li128ELi[123]ELb0' bin/$b 2>/dev/null |
      awk '/Function :/ {f=$3} /\/\*[0-9a-f]+\*\// {op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); c[f" "op]++} END {for (k in c) print k, c[k]}' |
      sort > $R/sass_$n.txt
    note "sass $n: $(wc -l < $R/sass_$n.txt) opcode lines"
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
# The index fingerprint of each new cell against base's of the same length (the same index:
# every field equal, pairs, ranges, columns, densities, per-head recalls).
keys = ["pairs", "index_ranges", "index_cols", "density", "density_min", "density_max", "recall",
        "recall_min", "recall_heads", "rel_l2_error"]
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_new*.jsonl"))):
    L = f.rsplit("_", 1)[1][:-6]
    fb = os.path.join(sys.argv[1], "bench_base_%s.jsonl" % L)
    try:
        b = json.loads(open(fb).readline()); n = json.loads(open(f).readline())
    except Exception:
        continue
    diff = [k for k in keys if b.get(k) != n.get(k)]
    print("fingerprint %s vs base_%s: %s" % (os.path.basename(f)[6:-6], L,
                                             "equal" if not diff else "DIFFERS " + ",".join(diff)))
PY
for f in $R/ncu_*.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename $f)" >> "$OUT/summary.txt"
  grep -E "SlPassKernel|Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|stalled_(barrier|long_scoreboard|short_scoreboard|wait|mio_throttle|lg_throttle|math_pipe_throttle|branch_resolving|no_instruction|not_selected|selected|dispatch_stall)_per|inst_executed.sum|bank_conflicts" "$f" | sed -E 's/ +/ /g' >> "$OUT/summary.txt"
done
(cd $R && tar -czf "$OUT/all.tar.gz" .)
note "done"
