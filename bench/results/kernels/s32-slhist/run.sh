#!/usr/bin/env bash
# s32-slhist device run (s31-slhist's run.sh, s31-sa's unpacking). `new` = this branch (pass 2's
# knob SPATTN_SL_HIST=H: 1 one branch per n-tile, 2 no branch, 4 two key buffers, 6 = 4 + 2, each
# the 4-CTA instance; unset = main's 5-CTA pass 2), `base` = main b50f02c's spattn-bench. STEPS, in
# order (each skipped once the script has run CAP seconds):
#   test     sampled_lines_gpu_test, then build_index_gpu_test '*sampled_lines*:*SampledLines*'
#   LEN:RUN  one bench process: spattn-bench --device=cuda llm_mix 32/8 heads d128 bf16,
#            sampled_lines gamma 0.95 on every head, block_m 128, SPATTN_GPU_BUILDER_PROFILE=1;
#            RUN = binary[:VAR=VALUE[+VAR=VALUE]]
# Outputs: summary.txt + all.tar.gz in $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/s32slhist && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for p in *.patch.zst; do
  $Z --patch-from="$W/bin/spattn-bench-base" $p -o "$W/bin/${p%.patch.zst}"
done
chmod +x "$W"/bin/*
cp stages.py md5.txt "$W/"
cd "$W"
R=$W/out; mkdir -p $R
CAP=${CAP:-100}
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
left() { [ $SECONDS -lt $CAP ] || { note "skipped: $1 (cap $CAP s)"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
note "md5: $(cd bin && md5sum -c ../md5.txt | tr '\n' ' ')"
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
export LD_LIBRARY_PATH=$PWD/lib
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
  timeout ${TEST_TIMEOUT:-50} bin/build_index_gpu_test --gtest_filter="${TEST_FILTER:-*sampled_lines*:*SampledLines*}" > $R/test_gpu_1.log 2>&1
  note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_gpu_1.log | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|^\[       OK" -A3 $R/test_gpu_1.log | head -40 | tee -a "$OUT/summary.txt"
}
for s in ${STEPS:-test}; do
  case $s in
    test) tests ;;
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
# Every cell's index fingerprint against base's first cell of its length.
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
    miss = [k for k in keys if k not in b]
    print("fingerprint %s vs base_%s: %s%s" % (tag, L, "equal" if not diff else "DIFFERS " + ",".join(diff),
                                               (" (missing in base: " + ",".join(miss) + ")") if miss else ""))
PY
python3 stages.py $R > $R/stages.txt 2>&1; cat $R/stages.txt | tee -a "$OUT/summary.txt"
(cd $R && tar -czf "$OUT/all.tar.gz" .)
note "done"
