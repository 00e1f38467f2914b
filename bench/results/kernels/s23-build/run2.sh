#!/usr/bin/env bash
# s23-build device run 2 (the final code: run 1's less the pass-2 bit rounding and the double
# probability tile): build_index_gpu_test (vertical_slash, flex_prefill, the merged builders'
# error cases), then spattn-bench at 32K, this branch ("new") and main c3ec5f8's ("base") in
# turn, with per-stage builder times (SPATTN_GPU_BUILDER_PROFILE=1) and without (NP), --repeat=10.
set -u
cd "$(dirname "$0")"
W=/tmp/s23b && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z new.zst -o "$W/bin/spattn-bench"
$Z --patch-from="$W/bin/spattn-bench" base.patch.zst -o "$W/bin/spattn-bench-base"
$Z --patch-from="$W/bin/spattn-bench" test.patch.zst -o "$W/bin/build_index_gpu_test"
chmod +x "$W"/bin/*
cp stages.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s23bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${TEST_S:-40} bin/build_index_gpu_test --gtest_filter="${FILTER:-*vertical_slash*:*flex_prefill*:*Merged*}" > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20 | tee -a "$OUT/summary.txt"
export SPATTN_GPU_BUILDER_PROFILE=1
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --warmup=2 --repeat=${REPEAT:-10} --recall_rows=16"
bench() {  # variant len methods env...
  local v=$1 len=$2 m=$3; shift 3
  if [ $SECONDS -gt ${STOP_AFTER:-30} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-30} $bin $C --seq_len=$len --methods=$m >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
bench base 32768 vertical_slash X=1
bench new 32768 vertical_slash X=1
bench newNP 32768 vertical_slash -u SPATTN_GPU_BUILDER_PROFILE
bench baseNP 32768 vertical_slash -u SPATTN_GPU_BUILDER_PROFILE
python3 - "$OUT" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("new", "base", "varP", "newNP", "baseNP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-5s %-16s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f recall %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r.get("recall")))
PY
python3 stages.py "$OUT" | sed "s|$OUT|run2|" | tee "$OUT/stages.txt"
# Per-build stage lines (the spread, build to build).
grep -h "gpu builder" "$OUT"/bench_*.err > /dev/null 2>&1 && for v in new base varP; do
  [ -f "$OUT/bench_$v.err" ] && awk -v v=$v '/seq_len/ {s=$0} /gpu builder/ {print v, $0}' "$OUT/bench_$v.err"
done > "$OUT/stage_lines.txt"
cat "$OUT/summary.txt"
(cd "$OUT" && tar -czf /tmp/s23b_all.tgz . && find . -type f ! -name summary.txt ! -name stages.txt ! -name shares.txt ! -name gpu.txt ! -name 'ncu_*' -delete && mv /tmp/s23b_all.tgz all.tgz)
