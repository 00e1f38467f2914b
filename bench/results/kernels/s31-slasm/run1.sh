#!/usr/bin/env bash
# s31-slasm device runs 1 and 2 (on the GPU machine; s30-slkv's run.sh pattern). `new` = this branch
# (knobs by env; run 1's binary, commit 9126a48: SPATTN_SL_ASM_WARP=0 / SPATTN_SL_ASM_REC=0 gave
# main's loops / a Begin per row; run 2's, 866575f: SPATTN_SL_ASM_RUNS=0 / SPATTN_SL_BUCKET_LOADS=1
# main's column loop / bucket loops; the branch's last commit keeps only SPATTN_SL_BUCKET_LOADS=8,
# opt-in), `base` = main e30e6a9's spattn-bench. Steps stop once the
# script has run CAP seconds; RECALL_ROWS (default 16) for the cells below 1M.
#  1. sampled_lines_gpu_test; build_index_gpu_test TEST_FILTER (sampled_lines' cases, incl.
#     the branch test of the commit run and the 4-segment bucket test).
#  2. Bench cells, one process each, in CELLS order: LEN:binary[:VAR=VALUE[+VAR=VALUE]];
#     spattn-bench --device=cuda llm_mix 32/8 heads d128 bf16 sampled_lines gamma 0.95 block_m 128,
#     SPATTN_GPU_BUILDER_PROFILE=1; 1M = the chunk (q_len 65536, 48 GiB workspace) with
#     recall_rows 1, warmup 1, repeat 1 (the build's stages are what this measures).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s31slasm_out; rm -rf $R; mkdir -p $R
CAP=${CAP:-110}
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
left() { [ $SECONDS -lt $CAP ] || { note "skipped: $1 (cap $CAP s)"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
W=/tmp/s31slasm && rm -rf $W && mkdir -p $W && tar -xJf all.tar.xz -C $W
cp builder_stages.py $W/
cd $W
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
export LD_LIBRARY_PATH=$PWD/lib
(cd bin && md5sum * > $R/md5.txt)
if [ "${TESTS:-1}" != 0 ]; then
  timeout 30 bin/sampled_lines_gpu_test > $R/test_sampled_lines_gpu_test.log 2>&1
  note "sampled_lines_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' $R/test_sampled_lines_gpu_test.log | tr '\n' ' ')"
  timeout ${TEST_TIMEOUT:-60} bin/build_index_gpu_test --gtest_filter="${TEST_FILTER:-*sampled_lines*:*SampledLines*}" > $R/test_build_index.log 2>&1
  note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_build_index.log | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A3 $R/test_build_index.log | head -30 | tee -a "$OUT/summary.txt"
fi
bench() {  # tag, binary, len, extra env...
  local tag=$1 b=$2 len=$3; shift 3
  local shape="--seq_len=$len --recall_rows=${RECALL_ROWS:-16} --warmup=1 --repeat=$((len > 32768 ? 2 : 3))" to=$((len / 4096 + 20))
  if [ $len -ge 1048576 ]; then
    shape="--seq_len=$len --q_len=65536 --recall_rows=1 --warmup=1 --repeat=1 --gpu_workspace_bytes=51539607552"; to=90
  fi
  env "$@" SPATTN_GPU_BUILDER_PROFILE=1 timeout $to bin/$b \
    --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
    --group_by=all $shape --block_m=128 --methods=sampled_lines --sampled_lines.gamma=0.95 \
    > $R/$tag.jsonl 2> $R/$tag.err
  note "bench $tag rc=$? | $(grep -h 'gpu builder sampled_lines: est' $R/$tag.err | tail -1 | sed 's/gpu builder sampled_lines: //')"
}
for c in ${CELLS:-131072:base 131072:new 32768:base 32768:new 1048576:base 1048576:new}; do
  len=${c%%:*}; run=${c#*:}; n=${run%%:*}; envs=()
  if [ "$run" != "$n" ]; then IFS='+' read -ra envs <<< "${run#*:}"; fi
  tag=${n}_$len
  for e in "${envs[@]}"; do tag=${tag}_$(echo "${e#SPATTN_SL_}" | tr '=,' '--'); done
  [ -e $R/$tag.jsonl ] && tag=${tag}_2
  b=spattn-bench; [ $n = base ] && b=spattn-bench-base
  left "bench $tag" && bench $tag $b $len "${envs[@]}"
done
python3 - $R <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
keys = ["pairs", "index_ranges", "index_cols", "density", "density_min", "density_max", "recall",
        "recall_min", "recall_heads", "rel_l2_error"]
cells = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    tag = os.path.basename(f)[:-6]
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        if "error" in r: print(tag, "ERROR", str(r["error"])[:200]); continue
        cells[tag] = r
        print("%-32s index %8.2f kernel %8.2f density %.4f recall %.4f cols %d %s" % (tag,
              r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], r["index_cols"], r.get("device", "")))
for tag, r in sorted(cells.items()):
    L = tag.split("_")[1]; b = cells.get("base_" + L)
    if b is None or tag == "base_" + L: continue
    diff = [k for k in keys if b.get(k) != r.get(k)]
    print("fingerprint %s vs base_%s: %s" % (tag, L, "equal" if not diff else "DIFFERS " + ",".join(diff)))
PY
args=(); for f in $R/*.err; do n=$(basename $f .err); args+=("$n=$R/$n"); done
python3 builder_stages.py "${args[@]}" > $R/stages.txt 2>&1; cat $R/stages.txt | tee -a "$OUT/summary.txt"
(cd $R && tar -czf "$OUT/all.tar.gz" .)
note "done"
